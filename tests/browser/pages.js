// SPDX-License-Identifier: ISC
// node -r ./hook.js pages.js PAGE: opens one page of CoreScope's front end served by the server
// at BASE_URL and checks what a user would see: it loads, shows its main rows, shows no error
// message, and the console has no error that names an /api/ path. Exit 0 when it does;
// otherwise 1, with what failed and every /api/ call that did not answer 2xx. SCREENSHOT_DIR,
// when set, receives PAGE.png (to compare with CoreScope's own server side by side).
'use strict';
const { chromium } = require('playwright');

const BASE = process.env.BASE_URL;
const WAIT_MS = Number(process.env.PAGE_WAIT_MS || 45000);
const ERROR_TEXT = /(^|\s)(Error:|Error loading|Failed to load)|API \d{3}/;

async function json(page, path) {
  const r = await page.request.get(BASE + path);
  if (!r.ok()) throw new Error(`GET ${path} answered ${r.status()} (needed to choose what to open)`);
  return r.json();
}

async function rows(page, selector, min = 1, timeout = WAIT_MS) {
  await page.waitForFunction(
    ([sel, n]) => document.querySelectorAll(sel).length >= n,
    [selector, min],
    { timeout }
  );
  return page.locator(selector).count();
}

async function textAppears(page, text) {
  await page.waitForFunction((t) => document.body.innerText.includes(t), text, {
    timeout: WAIT_MS,
  });
}

// Each page: where to go and what must show. Values to look for come from the API itself
// (the endpoints' own tests check those against the database).
const PAGES = {
  async home(page) {
    const { nodes } = await json(page, '/api/nodes?limit=50&sortBy=name');
    const name = nodes.map((x) => x.name || '').find((x) => /^[A-Za-z]{4}/.test(x));
    await page.goto(BASE + '/#/home');
    // A first visit asks how familiar the user is: the analyzer, not the guides.
    await page.waitForSelector('#homeSearch, #chooseExp', { timeout: WAIT_MS });
    if (await page.locator('#chooseExp').count()) await page.click('#chooseExp');
    // The page renders itself again as its data arrives: type until suggestions show.
    const until = Date.now() + WAIT_MS;
    let n = 0;
    while (!n && Date.now() < until) {
      await page.waitForSelector('#homeSearch', { timeout: WAIT_MS });
      await page.fill('#homeSearch', name.slice(0, 4)).catch(() => {});
      n = await rows(page, '#homeSuggest .suggest-item', 1, 5000).catch(() => 0);
    }
    if (!n) throw new Error(`no search suggestion for "${name.slice(0, 4)}"`);
    await textAppears(page, name);
    return `${n} suggestions for "${name.slice(0, 4)}"`;
  },
  async packets(page) {
    const { packets } = await json(page, '/api/packets?limit=200');
    const names = [...new Set(packets.map((p) => p.observer_name).filter(Boolean))];
    await page.goto(BASE + '/#/packets');
    const n = await rows(page, '#pktBody tr');
    const body = await page.locator('#pktBody').innerText();
    if (/undefined/.test(body)) throw new Error('the packets table shows "undefined"');
    const observers = await page.locator('#pktBody td.col-observer').allInnerTexts();
    if (!observers.some((t) => names.some((nm) => t.trim().startsWith(nm.slice(0, 8)))))
      throw new Error(`no row names an observer (cells: ${observers.slice(0, 3).join(' | ')})`);
    const paths = await rows(page, '#pktBody td.col-path .path-hops *');
    return `${n} rows, observers named, ${paths} path elements`;
  },
  async packet_detail(page) {
    const { packets } = await json(page, '/api/packets?limit=1');
    const hash = packets[0].hash;
    await page.goto(BASE + '/#/packets/' + hash);
    await textAppears(page, hash);
    const n = await rows(page, '#app table tbody tr');
    return `packet ${hash}, ${n} table rows`;
  },
  async map(page) {
    await page.goto(BASE + '/#/map');
    const n = await rows(page, '#app .leaflet-marker-icon, #app path.leaflet-interactive');
    return `${n} markers`;
  },
  async nodes(page) {
    const { nodes } = await json(page, '/api/nodes?limit=1');
    await page.goto(BASE + '/#/nodes');
    const n = await rows(page, '#nodesBody tr');
    if (nodes[0].name) await textAppears(page, nodes[0].name);
    return `${n} rows`;
  },
  async node_detail(page) {
    const { nodes } = await json(page, '/api/nodes?limit=1&role=repeater');
    await page.goto(BASE + '/#/nodes/' + nodes[0].public_key);
    await textAppears(page, nodes[0].name);
    await page.waitForFunction(() => !/Loading/.test(document.querySelector('#app').innerText), null, {
      timeout: WAIT_MS,
    });
    return `node ${nodes[0].name}`;
  },
  async channels(page) {
    await page.goto(BASE + '/#/channels');
    const n = await rows(page, '#chList .ch-item');
    await page.locator('#chList .ch-item').first().click();
    const m = await rows(page, '#chMessages .ch-msg-bubble');
    return `${n} channels, ${m} messages in the first`;
  },
  async observers(page) {
    const { observers } = await json(page, '/api/observers');
    await page.goto(BASE + '/#/observers');
    const n = await rows(page, '#app table tbody tr');
    const named = observers.find((o) => o.name);
    if (named) await textAppears(page, named.name);
    return `${n} rows`;
  },
  async observer_detail(page) {
    const { observers } = await json(page, '/api/observers');
    const o = observers.find((x) => x.name) || observers[0];
    await page.goto(BASE + '/#/observers/' + encodeURIComponent(o.id));
    await textAppears(page, o.name || o.id);
    const n = await rows(page, '#app table tbody tr');
    return `observer ${o.name || o.id}, ${n} rows`;
  },
  async traces(page) {
    const { packets } = await json(page, '/api/packets?limit=1');
    await page.goto(BASE + '/#/traces/' + packets[0].hash);
    await page.waitForSelector('.trace-summary', { timeout: WAIT_MS });
    return `trace of ${packets[0].hash}`;
  },
  async reach(page) {
    // A repeater with two-way links in the default 7 days (the table's first view).
    const { nodes } = await json(page, '/api/nodes?role=repeater&limit=60&sortBy=packetCount');
    let pk = null;
    for (const n of nodes) {
      const r = await json(page, '/api/nodes/' + n.public_key + '/reach');
      if (r.links.some((l) => l.bidir)) {
        pk = n.public_key;
        break;
      }
    }
    if (!pk) throw new Error('no repeater with a two-way link in 7 days');
    await page.goto(BASE + '/#/nodes/' + pk + '/reach');
    await page.waitForSelector('.nq-head', { timeout: WAIT_MS });
    const n = await rows(page, '#nqRows tr');
    return `${n} links of ${pk.slice(0, 8)}`;
  },
};

(async () => {
  const name = process.argv[2];
  if (!BASE || !PAGES[name]) {
    console.error(`usage: BASE_URL=http://HOST:PORT node -r hook.js pages.js PAGE (${Object.keys(PAGES).join(', ')})`);
    process.exit(64);
  }
  const browser = await chromium.launch();
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const apiErrors = [];
  const failedCalls = [];
  page.on('console', (msg) => {
    const where = (msg.location() && msg.location().url) || '';
    if (msg.type() === 'error' && (/\/api\//.test(msg.text()) || /\/api\//.test(where)))
      apiErrors.push(`${msg.text()} (${where})`);
  });
  page.on('response', (r) => {
    const u = new URL(r.url());
    if (u.pathname.startsWith('/api/') && r.status() >= 400)
      failedCalls.push(`${r.status()} ${u.pathname}${u.search}`);
  });
  let failure = null;
  let summary = '';
  try {
    summary = await PAGES[name](page);
    const text = await page.locator('#app').innerText();
    const shown = ERROR_TEXT.exec(text);
    if (shown) {
      const at = text.indexOf(shown[0]);
      failure = `the page shows an error: "${text.slice(Math.max(0, at - 40), at + 120).replace(/\s+/g, ' ')}"`;
    }
  } catch (e) {
    failure = e.message.split('\n')[0];
  }
  if (!failure && apiErrors.length) failure = `console errors naming /api/: ${apiErrors.join('; ')}`;
  if (process.env.SCREENSHOT_DIR)
    await page.screenshot({ path: `${process.env.SCREENSHOT_DIR}/${name}.png` }).catch(() => {});
  await browser.close();
  const calls = failedCalls.length ? `; /api/ calls not 2xx: ${[...new Set(failedCalls)].join(', ')}` : '';
  if (failure) {
    console.error(`${name}: FAIL: ${failure}${calls}`);
    process.exit(1);
  }
  console.log(`${name}: ok: ${summary}${calls}`);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});

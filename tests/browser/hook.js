// SPDX-License-Identifier: ISC
// Preloaded (node -r hook.js) before a browser test, CoreScope's own included, so that it runs
// here unmodified:
//  - require('playwright') gives playwright-core (the package without its own browsers);
//  - chromium.launch() starts Debian's chromium (CHROMIUM_PATH, default /usr/bin/chromium),
//    headless, without the sandbox (tests run as root in containers);
//  - every page of every context gets the CDN files the front end loads from unpkg.com
//    (leaflet, leaflet.heat, chart.js) from the local npm copy, and any other outside host is
//    aborted (map tiles: no check needs them, and no machine here reaches them); any port of
//    BASE_URL's host is the servers' own (tools/browser-compare.js visits two).
'use strict';
const Module = require('module');
const path = require('path');
const fs = require('fs');

const origResolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === 'playwright') request = 'playwright-core';
  return origResolve.call(this, request, ...rest);
};

const modules = path.dirname(path.dirname(require.resolve('playwright-core/package.json')));
// unpkg path (package@version/file) -> the installed package's file.
function localFile(url) {
  const m = /^https:\/\/unpkg\.com\/(@?[^@/]+)@[^/]+\/(.+)$/.exec(url);
  if (!m) return null;
  const file = path.join(modules, m[1], m[2]);
  return file.startsWith(modules + path.sep) && fs.existsSync(file) ? file : null;
}
const TYPES = { '.js': 'application/javascript', '.css': 'text/css', '.png': 'image/png' };

async function routeOutside(context) {
  const base = new URL(process.env.BASE_URL || 'http://127.0.0.1');
  await context.route(
    (url) => url.hostname !== base.hostname,
    (route) => {
      const file = localFile(route.request().url());
      if (!file) return route.abort();
      return route.fulfill({
        status: 200,
        contentType: TYPES[path.extname(file)] || 'application/octet-stream',
        body: fs.readFileSync(file),
      });
    }
  );
}

const { chromium } = require('playwright-core');
const launch = chromium.launch.bind(chromium);
chromium.launch = async function (options = {}) {
  const opts = Object.assign({}, options);
  opts.executablePath = opts.executablePath || process.env.CHROMIUM_PATH || '/usr/bin/chromium';
  opts.headless = true;
  opts.args = [...(opts.args || []), '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'];
  const browser = await launch(opts);
  const newContext = browser.newContext.bind(browser);
  browser.newContext = async function (...args) {
    const context = await newContext(...args);
    await routeOutside(context);
    return context;
  };
  // browser.newPage makes a context of its own: give it the same routes.
  browser.newPage = async function (...args) {
    const context = await browser.newContext(...args);
    const page = await context.newPage();
    page.on('close', () => context.close().catch(() => {}));
    return page;
  };
  return browser;
};

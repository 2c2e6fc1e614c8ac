/* SPDX-License-Identifier: ISC */
#include "config.h"

#include "gate_fifo.h"
#include "log.h"
#include "router.h"
#include "test_hooks.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIELD(f) offsetof(struct mg_config, f), sizeof(((struct mg_config *)0)->f)

const struct mg_config_var mg_config_vars[] = {
    {"MESHGATE_ENV_FILE", MG_CFG_PATH, FIELD(env_file), 0, 0, "",
     "a KEY=value file (systemd's EnvironmentFile= syntax) read at start and again on SIGHUP; "
     "the process environment wins over it; empty: none",
     MG_RELOAD_RESTART},
    {"MESHGATE_LISTEN", MG_CFG_LISTEN, FIELD(listen_host), 0, 0, "127.0.0.1:8080",
     "address and port to listen on: HOST:PORT, [IPV6]:PORT or :PORT (all addresses); "
     "ignored when systemd passes a socket (LISTEN_FDS)",
     MG_RELOAD_RESTART},
    {"MESHGATE_BACKLOG", MG_CFG_INT, FIELD(backlog), 1, 65535, "511",
     "length of the listen queue for connections no worker has accepted yet", MG_RELOAD_RESTART},
    {"MESHGATE_DB", MG_CFG_PATH, FIELD(db_path), 0, 0, NULL,
     "path of CoreScope's SQLite database; opened read-only, never written", MG_RELOAD_RESTART},
    {"MESHGATE_DB_BUSY_TIMEOUT_MS", MG_CFG_INT, FIELD(db_busy_timeout_ms), 0, 60000, "5000",
     "how long a query waits for a lock held by the ingestor before it fails (ms)", MG_RELOAD_LIVE},
    {"MESHGATE_WORKERS", MG_CFG_INT, FIELD(workers), 1, MG_WORKERS_MAX, "16",
     "number of worker processes", MG_RELOAD_LIVE},
    {"MESHGATE_SHM_NAME", MG_CFG_SHM_NAME, FIELD(shm_name), 0, 0, "",
     "name of the POSIX shared-memory segment (\"/name\"); empty: /meshgate-HOST-PORT",
     MG_RELOAD_RESTART},
    {"MESHGATE_DRAIN_TIMEOUT_MS", MG_CFG_INT, FIELD(drain_timeout_ms), 0, 600000, "10000",
     "on SIGTERM or SIGHUP, how long requests in flight may take to finish (ms)", MG_RELOAD_LIVE},
    {"MESHGATE_WORKER_STALL_MS", MG_CFG_INT, FIELD(worker_stall_ms), 500, 3600000, "30000",
     "a worker whose heartbeat is older than this (stopped, or stuck) is killed with SIGKILL "
     "and replaced, and what it held is given back (ms)",
     MG_RELOAD_LIVE},
    {"MESHGATE_HEADER_TIMEOUT_MS", MG_CFG_INT, FIELD(header_timeout_ms), 100, 600000, "10000",
     "time a client has to send a whole request head, from its first byte (ms)", MG_RELOAD_LIVE},
    {"MESHGATE_IDLE_TIMEOUT_MS", MG_CFG_INT, FIELD(idle_timeout_ms), 100, 3600000, "15000",
     "time a kept-alive connection may sit idle between requests (ms)", MG_RELOAD_LIVE},
    {"MESHGATE_SEND_TIMEOUT_MS", MG_CFG_INT, FIELD(send_timeout_ms), 100, 600000, "30000",
     "time a client has to read a whole response (ms)", MG_RELOAD_LIVE},
    {"MESHGATE_MAX_REQUESTS_PER_CONN", MG_CFG_INT, FIELD(max_requests_per_conn), 1, 1000000, "1000",
     "requests served on one connection before it is closed", MG_RELOAD_LIVE},
    {"MESHGATE_MAX_CONNS_PER_WORKER", MG_CFG_INT, FIELD(max_conns_per_worker), 1, 65536, "256",
     "open connections one worker keeps; past it a new connection sheds the oldest one still "
     "sending its request head, or waits when there is none",
     MG_RELOAD_RESTART},
    {"MESHGATE_MAX_CONNS_PER_CLIENT", MG_CFG_INT, FIELD(max_conns_per_client), 0, 65536, "64",
     "open connections one client address (IPv4 address, IPv6 /64) may have in the whole "
     "server; past it a new connection is closed at once; trusted proxies are not counted; "
     "0: no cap",
     MG_RELOAD_LIVE},
    {"MESHGATE_SHED_TARPIT", MG_CFG_INT, FIELD(shed_tarpit), 0, 65536, "1024",
     "connections one worker keeps open unread after shedding them, each until the header "
     "deadline it already had (only connections that began a head and are counted against "
     "MESHGATE_MAX_CONNS_PER_CLIENT, which they go on counting against), so a slowloris is not "
     "told to connect again; past it a shed connection is closed; 0: shed connections close",
     MG_RELOAD_RESTART},
    {"MESHGATE_MAX_UNREAD_BYTES_PER_CLIENT", MG_CFG_INT, FIELD(max_unread_bytes_per_client), 0,
     1073741824, "8388608",
     "bytes of answers one client address (IPv4 address, IPv6 /64) may leave unread in one "
     "worker; past it the client's next answer is replaced by 503 and its connection closed; "
     "trusted proxies are not counted; 0: no cap",
     MG_RELOAD_LIVE},
    {"MESHGATE_BODY_TIMEOUT_MS", MG_CFG_INT, FIELD(body_timeout_ms), 100, 600000, "30000",
     "time a client has to send a whole request body, from the end of its head; past it: 408 "
     "and the connection closes (ms)",
     MG_RELOAD_LIVE},
    {"MESHGATE_BODY_MIN_RATE", MG_CFG_INT, FIELD(body_min_rate), 0, 1073741824, "500",
     "bytes a second a request body must arrive at, on average, once MESHGATE_BODY_GRACE_MS "
     "have passed; slower: 408 and the connection closes; 0: no minimum",
     MG_RELOAD_LIVE},
    {"MESHGATE_BODY_GRACE_MS", MG_CFG_INT, FIELD(body_grace_ms), 0, 600000, "5000",
     "time a request body is given before MESHGATE_BODY_MIN_RATE applies (ms)", MG_RELOAD_LIVE},
    {"MESHGATE_REFUSAL_PACE_MAX_MS", MG_CFG_INT, FIELD(refusal_pace_max_ms), 0, 60000, "1000",
     "longest a refusal (429, or a 503 for a share or a full line) is held before it is "
     "written to a client address refused again and again, its connection not read meanwhile; "
     "the delay doubles with each refusal in a row after the first 4; trusted proxies are not "
     "paced; 0: refusals are never paced (ms)",
     MG_RELOAD_LIVE},
    {"MESHGATE_MAX_HEADER_BYTES", MG_CFG_INT, FIELD(max_header_bytes), 1024, 1048576, "8192",
     "largest request head (request line and headers) in bytes; larger: 431", MG_RELOAD_LIVE},
    {"MESHGATE_MAX_URI_BYTES", MG_CFG_INT, FIELD(max_uri_bytes), 64, 1048576, "4096",
     "longest request target in bytes; longer: 414 (must not exceed MESHGATE_MAX_HEADER_BYTES)",
     MG_RELOAD_LIVE},
    {"MESHGATE_GZIP_MIN_BYTES", MG_CFG_INT, FIELD(gzip_min_bytes), 0, 1073741824, "1024",
     "bodies at least this large are gzip-compressed for clients that accept it; 0: never",
     MG_RELOAD_LIVE},
    {"MESHGATE_PUBLIC_DIR", MG_CFG_PATH, FIELD(public_dir), 0, 0, "",
     "directory of a front end's static files, served outside /api/; empty: none", MG_RELOAD_LIVE},
    {"MESHGATE_CORESCOPE_CONFIG", MG_CFG_PATH, FIELD(corescope_config), 0, 0, "",
     "CoreScope's config.json, read at start and on SIGHUP, that /api/config/* answer from "
     "(theme.json beside it too); empty: CoreScope's built-in defaults",
     MG_RELOAD_LIVE},
    {"MESHGATE_PERF_MEM_COOLDOWN_MS", MG_CFG_INT, FIELD(perf_mem_cooldown_ms), 0, 3600000, "5000",
     "after a /api/perf?mem=1 walk completes, how long until the next may start (ms)",
     MG_RELOAD_LIVE},
    {"MESHGATE_PERF_MEM_GATE", MG_CFG_BOOL, FIELD(perf_mem_gate), 0, 0, "1",
     "1: one /api/perf?mem=1 walk at a time with a cooldown; 0: no gate (for A/B "
     "measurements only)",
     MG_RELOAD_LIVE},
    {"MESHGATE_REACH_COLD_MAX", MG_CFG_INT, FIELD(reach_cold_max), 0, 64, "2",
     "cold reach reports built at once in the whole server; 0: unlimited (for A/B only)",
     MG_RELOAD_LIVE},
    {"MESHGATE_REACH_COLD_WAIT_MS", MG_CFG_INT, FIELD(reach_cold_wait_ms), 0, 60000, "3000",
     "longest wait in line for a cold-build permit before 429 (ms); 0: no waiting", MG_RELOAD_LIVE},
    {"MESHGATE_REACH_COLD_QUEUE", MG_CFG_INT_AUTO, FIELD(reach_cold_queue), 0, 256, "auto",
     "places in line for cold reach reports (waiting for a permit or for an identical build); "
     "auto: half the workers minus MESHGATE_REACH_COLD_MAX",
     MG_RELOAD_LIVE},
    {"MESHGATE_REACH_CACHE_TTL_MS", MG_CFG_INT, FIELD(reach_cache_ttl_ms), 0, 86400000, "300000",
     "how long a reach report is served from the shared cache (ms); 0: no cache", MG_RELOAD_LIVE},
    {"MESHGATE_REACH_CACHE_ENTRIES", MG_CFG_INT, FIELD(reach_cache_entries), 1, 4096, "256",
     "reach reports the shared cache holds", MG_RELOAD_RESTART},
    {"MESHGATE_TX_SUMMARIES", MG_CFG_INT, FIELD(tx_summaries), 0, 1, "1",
     "1: pages of /api/packets read per-transmission summaries the group keeps (built once "
     "under the cold-scan gate); 0: every page reads its observations",
     MG_RELOAD_LIVE},
    {"MESHGATE_STATE_DIR", MG_CFG_PATH, FIELD(state_dir), 0, 0, "",
     "directory (absolute, ours, writable; never the database's) where the group's derived "
     "tables (relay table and probe, hash sizes, region map, neighbour graph) are kept across "
     "restarts, keyed by the database's first rows and highest ids, and served from the "
     "start as stale copies while their passes run again; empty: none",
     MG_RELOAD_RESTART},
    {"MESHGATE_REACH_CACHE_BYTES", MG_CFG_INT, FIELD(reach_cache_bytes), 4096, 1073741824,
     "16777216",
     "shared memory for cached report bodies: one pool of 4 KiB pages all entries share, "
     "each body taking as many as it needs (a body over a quarter of it is served but not "
     "cached)",
     MG_RELOAD_RESTART},
    {"MESHGATE_API_KEYS_FILE", MG_CFG_PATH, FIELD(api_keys_file), 0, 0, "",
     "file of API keys (one a line) that sign clients in, readable by meshgate alone; "
     "empty: none",
     MG_RELOAD_LIVE},
    {"MESHGATE_ANON_CONCURRENCY", MG_CFG_INT_AUTO, FIELD(anon_concurrency), 0, 64, "auto",
     "heavy requests of anonymous clients handled at once in the whole server; auto: half "
     "the workers (at least 1); 0: no line (for A/B measurements only)",
     MG_RELOAD_LIVE},
    {"MESHGATE_ANON_QUEUE", MG_CFG_INT, FIELD(anon_queue), 0, 256, "32",
     "anonymous heavy requests that may wait in line for a permit; past it: 503", MG_RELOAD_LIVE},
    {"MESHGATE_ANON_WAIT_MS", MG_CFG_INT, FIELD(anon_wait_ms), 0, 60000, "2000",
     "longest wait in the anonymous line before 503 (ms); 0: no waiting", MG_RELOAD_LIVE},
    {"MESHGATE_ANON_PER_CLIENT", MG_CFG_INT, FIELD(anon_per_client), 0, 256, "6",
     "permits and places of the anonymous line one client (an IPv4 address, an IPv6 /64) may "
     "hold together (default: a browser's six connections to a host), and the same of the "
     "upstream's gate for its anonymous requests; past it: 503 at once; 0: no share",
     MG_RELOAD_LIVE},
    {"MESHGATE_ANON_RATE", MG_CFG_INT, FIELD(anon_rate), 0, 1000000, "300",
     "heavy requests a minute one anonymous client (an IPv4 address, an IPv6 /64) may make "
     "on average; past it: 429; 0: no limit",
     MG_RELOAD_LIVE},
    {"MESHGATE_ANON_BURST", MG_CFG_INT, FIELD(anon_burst), 1, 100000, "30",
     "heavy requests one anonymous client may make at once before MESHGATE_ANON_RATE applies",
     MG_RELOAD_LIVE},
    {"MESHGATE_ANON_CLIENTS", MG_CFG_INT, FIELD(anon_clients), 8, 1048576, "4096",
     "clients the rate table tracks at once (rounded up to a multiple of 8); when it is full "
     "the least recently seen go",
     MG_RELOAD_RESTART},
    {"MESHGATE_ANON_NICE", MG_CFG_INT, FIELD(anon_nice), 0, 19, "10",
     "nice value of the helper threads that run anonymous heavy requests, so they yield the "
     "CPU to signed-in and light requests; 0: the same priority as everything else",
     MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM", MG_CFG_HOSTPORT, FIELD(upstream), 0, 0, "",
     "HOST:PORT (or http://HOST:PORT) of CoreScope's own server (on loopback); a request no "
     "native route answers (other /api/ paths, POST endpoints, the WebSocket) is passed to "
     "it; empty: off",
     MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_CONCURRENCY", MG_CFG_INT, FIELD(upstream_concurrency), 0,
     MG_FIFO_HOLDERS_MAX, "8",
     "requests at the upstream at once in the whole server (WebSocket tunnels not counted); "
     "0: no cap (A/B measurements only)",
     MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_QUEUE", MG_CFG_INT, FIELD(upstream_queue), 0, MG_FIFO_WAITERS_MAX, "64",
     "requests that may wait in line for the upstream; past it: 503", MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_WAIT_MS", MG_CFG_INT, FIELD(upstream_wait_ms), 0, 60000, "5000",
     "longest wait in the upstream's line before 503 (ms); 0: no waiting", MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_HEAVY", MG_CFG_STRING, FIELD(upstream_heavy), 0, 0,
     "/api/analytics/, /api/nodes/*/analytics",
     "path prefixes of upstream routes that are heavy (a '*' matches one path segment): their "
     "anonymous requests also pass the per-client rate limit; empty: none",
     MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_PREFER", MG_CFG_ROUTES, FIELD(upstream_prefer), 0, 0, "",
     "native routes (as /metrics names them, comma-separated) whose requests go to the upstream "
     "while it is set, for an operator who wants CoreScope's own answer for them; empty: none",
     MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_MAX_BODY_BYTES", MG_CFG_INT, FIELD(upstream_max_body_bytes), 0, 67108864,
     "1048576",
     "largest request body passed to the upstream (it must have a Content-Length); larger: 413",
     MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_CONNECT_TIMEOUT_MS", MG_CFG_INT, FIELD(upstream_connect_timeout_ms), 10,
     60000, "2000", "time to connect to the upstream before 504 (ms)", MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_TIMEOUT_MS", MG_CFG_INT, FIELD(upstream_timeout_ms), 100, 600000, "30000",
     "time the upstream has for its whole response head, and for each read or write of a "
     "body, before 504 (or the connection is cut) (ms)",
     MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_IDLE_CONNS", MG_CFG_INT, FIELD(upstream_idle_conns), 0, 1024, "8",
     "idle kept-alive connections to the upstream each worker keeps for reuse; 0: a new "
     "connection per request",
     MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_BREAKER_FAILURES", MG_CFG_INT, FIELD(upstream_breaker_failures), 0, 1000000,
     "5",
     "upstream failures in a row (refused, timed out, broken) that open the breaker: requests "
     "then fail fast with 502 until a probe succeeds; 0: never opens",
     MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_BREAKER_OPEN_MS", MG_CFG_INT, FIELD(upstream_breaker_open_ms), 100, 600000,
     "5000",
     "how long the open breaker fails fast before meshgate probes the upstream with a health "
     "request of its own (ms)",
     MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_HEALTH_PATH", MG_CFG_STRING, FIELD(upstream_health_path), 0, 0,
     "/api/healthz",
     "path of the health request meshgate sends to probe the open breaker (GET; a 2xx answer "
     "closes it); never a client's request; empty: /",
     MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_SIGNED_IN_RESERVE", MG_CFG_INT, FIELD(upstream_signed_in_reserve), 0, 64,
     "2",
     "permits of the upstream gate that only signed-in clients may take: anonymous requests hold "
     "at most MESHGATE_UPSTREAM_CONCURRENCY minus it (at least 1) and wait in line past it; 0: "
     "no reserve",
     MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_WEBSOCKETS", MG_CFG_INT, FIELD(upstream_websockets), 0, 1000000, "256",
     "WebSocket tunnels to the upstream open at once in the whole server; past it: 503; 0: no "
     "WebSocket",
     MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_WEBSOCKETS_PER_CLIENT", MG_CFG_INT, FIELD(upstream_websockets_per_client),
     0, 1000000, "16",
     "WebSocket tunnels one client address (as MESHGATE_MAX_CONNS_PER_CLIENT counts it) may "
     "hold at once; past it: 503; 0: no share",
     MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_TUNNEL_IDLE_MS", MG_CFG_INT, FIELD(upstream_tunnel_idle_ms), 200, 86400000,
     "120000",
     "a WebSocket tunnel whose client sends nothing for half of this is sent a ping; one that "
     "sends nothing (no pong either) for all of it is closed with a close frame (ms)",
     MG_RELOAD_LIVE},
    {"MESHGATE_UPSTREAM_RELAY_TIMEOUT_MS", MG_CFG_INT, FIELD(upstream_relay_timeout_ms), 100,
     3600000, "120000",
     "time a whole proxied exchange (request, response head and body) may take, however slowly "
     "the client reads; past it the connection is cut (ms); WebSocket tunnels are bounded by "
     "MESHGATE_UPSTREAM_TUNNEL_IDLE_MS instead",
     MG_RELOAD_LIVE},
    {"MESHGATE_LIVE_CLIENTS", MG_CFG_INT, FIELD(live_clients), 0, 1000000, "1024",
     "WebSocket clients of meshgate's own live feed open at once in the whole server (used "
     "without MESHGATE_UPSTREAM, or with MESHGATE_UPSTREAM_WEBSOCKETS=0), at most three quarters "
     "of MESHGATE_WORKERS x MESHGATE_MAX_CONNS_PER_WORKER (the rest stay for requests); past "
     "it: 503; 0: no live feed of meshgate's (404)",
     MG_RELOAD_LIVE},
    {"MESHGATE_LIVE_PER_CLIENT", MG_CFG_INT, FIELD(live_per_client), 0, 1000000, "16",
     "live feed clients one client address (as MESHGATE_MAX_CONNS_PER_CLIENT counts it) may "
     "hold at once; past it: 503; 0: no share",
     MG_RELOAD_LIVE},
    {"MESHGATE_LIVE_POLL_MS", MG_CFG_INT, FIELD(live_poll_ms), 20, 60000, "1000",
     "how often the one watcher of the group asks the database whether it changed (PRAGMA "
     "data_version) and reads the new observations for the live feed (ms; CoreScope's "
     "-poll-ms)",
     MG_RELOAD_LIVE},
    {"MESHGATE_LIVE_ORIGINS", MG_CFG_STRING, FIELD(live_origins), 0, 0, "",
     "origins (comma-separated, compared whole) of other sites' pages allowed to open the live "
     "feed, as CoreScope's corsAllowedOrigins; a page of the same host, or a client that sends "
     "no Origin, is always allowed; \"*\" is not honoured; others: 403",
     MG_RELOAD_LIVE},
    {"MESHGATE_LIVE_PING_MS", MG_CFG_INT, FIELD(live_ping_ms), 100, 3600000, "30000",
     "a live feed client is sent a ping this often; one that sends nothing (no pong either) "
     "for twice this is closed with a close frame (ms)",
     MG_RELOAD_LIVE},
    {"MESHGATE_TRUSTED_PROXIES", MG_CFG_CIDRS, FIELD(trusted_proxies_text), 0, 0, "",
     "addresses and networks (e.g. \"127.0.0.1, 10.0.0.0/8, ::1\") of reverse proxies whose "
     "X-Forwarded-For names the client; empty: the peer is always the client",
     MG_RELOAD_LIVE},
    {"MESHGATE_ADMIN_NETWORKS", MG_CFG_CIDRS, FIELD(admin_networks_text), 0, 0, "127.0.0.0/8, ::1",
     "addresses and networks whose clients may read /server-status and /metrics and see client "
     "addresses in /api/perf (signed-in clients may too); behind trusted proxies, the client "
     "X-Forwarded-For names; everyone else gets 404; empty: signed-in clients only",
     MG_RELOAD_LIVE},
    {"MESHGATE_AGENT_LISTEN", MG_CFG_ADDRESS, FIELD(agent_listen), 0, 0, "",
     "address and port (HOST:PORT, [IPV6]:PORT) of HAProxy's agent-check port, which the master "
     "answers with one line (ready up W%, drain, down or maint) and closes; empty: none",
     MG_RELOAD_RESTART},
    {"MESHGATE_AGENT_MAINT_FILE", MG_CFG_PATH, FIELD(agent_maint_file), 0, 0, "",
     "while this file exists the agent answers maint (HAProxy takes the server out); empty: "
     "none",
     MG_RELOAD_LIVE},
    {"MESHGATE_REPLICA_MAX_LAG_MS", MG_CFG_INT, FIELD(replica_max_lag_ms), 0, 86400000, "0",
     "MESHGATE_DB is a replica copy that a follower replaces whole: a new file is reloaded at "
     "once, its lag is measured from its modification time, and past this many ms the agent "
     "answers drain; 0: not a replica",
     MG_RELOAD_LIVE},
    {"MESHGATE_LOG_LEVEL", MG_CFG_LOG_LEVEL, FIELD(log_level), 0, 0, "info",
     "error, warning, info or debug", MG_RELOAD_LIVE},
    {"MESHGATE_ACCESS_LOG", MG_CFG_ACCESS_LOG, FIELD(access_log), 0, 0, "0",
     "one line per request on stderr: 0 (off), 1 (meshgate's format), combined (Apache's, "
     "with the duration in microseconds) or json (one object a line)",
     MG_RELOAD_LIVE},
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, MG_RELOAD_UNSET},
};

static const char *log_level_names[] = {"error", "warning", "info", "debug"};

const char *mg_access_log_name(int format)
{
    static const char *names[] = {"0", "1", "combined", "json"};
    if (format < MG_ACCESS_LOG_OFF || format > MG_ACCESS_LOG_JSON)
        return "?";
    return names[format];
}

const char *mg_log_level_name(int level)
{
    if (level < 0 || level > MG_LOG_DEBUG)
        return "?";
    return log_level_names[level];
}

static const char *env_lookup(const char *name, void *arg)
{
    (void)arg;
    return getenv(name);
}

#define UPSTREAM_ACCEPTED                                                                          \
    "must be empty (off), HOST:PORT, [IPV6]:PORT, or either after http:// (a trailing / "          \
    "allowed), with a port from 1 to 65535"

static int fail(char *err, size_t errlen, const struct mg_config_var *v, const char *value,
                const char *accepted)
{
    snprintf(err, errlen, "%s=%s: %s", v->name, value, accepted);
    return -1;
}

/* A whole number as a person writes it: digits, with a '-' only before a value that is not
 * zero. strtoll alone would also take "+5", "-0" and leading blanks. */
static int parse_int(const char *s, int64_t min, int64_t max, int64_t *out)
{
    const char *digits = s[0] == '-' ? s + 1 : s;
    if (!isdigit((unsigned char)digits[0]))
        return -1;
    if (s[0] == '-' && digits[strspn(digits, "0")] == '\0')
        return -1; /* "-0" */
    errno = 0;
    char *end;
    long long n = strtoll(s, &end, 10);
    if (errno || *end || end == s)
        return -1;
    if (n < min || n > max)
        return -1;
    *out = n;
    return 0;
}

static int parse_bool(const char *s, bool *out)
{
    static const char *yes[] = {"1", "yes", "true", "on"};
    static const char *no[] = {"0", "no", "false", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return *out = true, 0;
        if (strcasecmp(s, no[i]) == 0)
            return *out = false, 0;
    }
    return -1;
}

/* HOST:PORT, [V6]:PORT, or :PORT. The host is checked by the listener when it resolves it. */
static int parse_listen(const char *s, struct mg_config *cfg)
{
    return mg_addr_parse_host_port(s, cfg->listen_host, sizeof cfg->listen_host, &cfg->listen_port);
}

static int parse_shm_name(const char *s, char *out, size_t outlen)
{
    if (!*s) {
        out[0] = '\0';
        return 0;
    }
    size_t n = strlen(s);
    if (s[0] != '/' || n < 2 || n >= outlen || strchr(s + 1, '/'))
        return -1;
    /* "/." and "/.." name /dev/shm itself and its parent, not an object in it. */
    if (strcmp(s, "/.") == 0 || strcmp(s, "/..") == 0)
        return -1;
    for (const char *p = s + 1; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._-", *p))
            return -1;
    memcpy(out, s, n + 1);
    return 0;
}

/* A request path for the upstream: empty (the root), or "/" and more (what is not visible
 * ASCII is percent-encoded when it is sent). */
static bool request_path_ok(const char *s)
{
    return s[0] == '\0' || s[0] == '/';
}

/* The parsed list beside each list's text. */
static struct mg_cidr_list *cidr_list_of(struct mg_config *cfg, const struct mg_config_var *v)
{
    if (v->offset == offsetof(struct mg_config, admin_networks_text))
        return &cfg->admin_networks;
    return &cfg->trusted_proxies;
}

static int apply(struct mg_config *cfg, const struct mg_config_var *v, const char *value, char *err,
                 size_t errlen)
{
    char *field = (char *)cfg + v->offset;
    char accepted[160];
    switch (v->kind) {
    case MG_CFG_INT: {
        int64_t n;
        if (parse_int(value, v->min, v->max, &n) < 0) {
            snprintf(accepted, sizeof accepted,
                     "must be a whole number from %" PRId64 " to %" PRId64, v->min, v->max);
            return fail(err, errlen, v, value, accepted);
        }
        *(int32_t *)field = (int32_t)n;
        return 0;
    }
    case MG_CFG_INT_AUTO: {
        int64_t n;
        if (strcasecmp(value, "auto") == 0) {
            *(int32_t *)field = MG_CONFIG_AUTO;
            return 0;
        }
        if (parse_int(value, v->min, v->max, &n) < 0) {
            snprintf(accepted, sizeof accepted,
                     "must be auto or a whole number from %" PRId64 " to %" PRId64, v->min, v->max);
            return fail(err, errlen, v, value, accepted);
        }
        *(int32_t *)field = (int32_t)n;
        return 0;
    }
    case MG_CFG_BOOL:
        if (parse_bool(value, (bool *)field) < 0)
            return fail(err, errlen, v, value, "must be 1, 0, yes, no, true, false, on or off");
        return 0;
    case MG_CFG_STRING:
    case MG_CFG_PATH:
        if (strlen(value) >= v->size) {
            snprintf(accepted, sizeof accepted, "must be shorter than %zu bytes", v->size);
            return fail(err, errlen, v, value, accepted);
        }
        if (v->kind == MG_CFG_PATH && v->default_value == NULL && !*value)
            return fail(err, errlen, v, value, "must name a file");
        if (field == (char *)&cfg->upstream_health_path && !request_path_ok(value))
            return fail(err, errlen, v, value, "must be empty or a path that starts with '/'");
        memcpy(field, value, strlen(value) + 1);
        return 0;
    case MG_CFG_ROUTES: {
        if (strlen(value) >= v->size) {
            snprintf(accepted, sizeof accepted, "must be shorter than %zu bytes", v->size);
            return fail(err, errlen, v, value, accepted);
        }
        for (const char *p = value; *p;) {
            size_t n = strcspn(p, ", ");
            if (n > 0 && mg_route_by_template(p, n) == MG_ROUTE_NOT_FOUND) {
                snprintf(accepted, sizeof accepted,
                         "must list native routes as /metrics names them, separated by commas "
                         "(e.g. /api/nodes/:pubkey); %.*s is not one",
                         (int)(n > 64 ? 64 : n), p);
                return fail(err, errlen, v, value, accepted);
            }
            p += n;
            p += strspn(p, ", ");
        }
        memcpy(field, value, strlen(value) + 1);
        return 0;
    }
    case MG_CFG_LISTEN:
        if (parse_listen(value, cfg) < 0)
            return fail(err, errlen, v, value,
                        "must be HOST:PORT, [IPV6]:PORT or :PORT with a port from 1 to 65535");
        return 0;
    case MG_CFG_HOSTPORT: {
        /* As an operator pastes it: "http://HOST:PORT" and "http://HOST:PORT/" name the same
         * host; TLS is not spoken to the upstream. */
        static const char http[] = "http://";
        const char *hostport = value;
        size_t n = strlen(value);
        if (strncasecmp(value, "https://", 8) == 0)
            return fail(err, errlen, v, value,
                        "must be plain HTTP, HOST:PORT or http://HOST:PORT: meshgate does not "
                        "speak TLS to the upstream (run it on loopback)");
        if (strncasecmp(value, http, sizeof http - 1) == 0) {
            hostport += sizeof http - 1;
            n -= sizeof http - 1;
            if (n && hostport[n - 1] == '/')
                n--;
        }
        char host[MG_HOST_MAX], text[MG_HOST_MAX + 8];
        uint16_t port;
        if (n >= v->size || n >= sizeof text || (hostport != value && !n))
            return fail(err, errlen, v, value, UPSTREAM_ACCEPTED);
        memcpy(text, hostport, n);
        text[n] = '\0';
        if (*text && (mg_addr_parse_host_port(text, host, sizeof host, &port) < 0 || !*host))
            return fail(err, errlen, v, value, UPSTREAM_ACCEPTED);
        memcpy(field, text, n + 1);
        return 0;
    }
    case MG_CFG_ADDRESS: {
        char host[MG_HOST_MAX];
        uint16_t port;
        if (strlen(value) >= v->size ||
            (*value && mg_addr_parse_host_port(value, host, sizeof host, &port) < 0))
            return fail(err, errlen, v, value,
                        "must be empty, HOST:PORT, [IPV6]:PORT or :PORT with a port from 1 to "
                        "65535");
        memcpy(field, value, strlen(value) + 1);
        return 0;
    }
    case MG_CFG_SHM_NAME:
        if (parse_shm_name(value, field, v->size) < 0)
            return fail(err, errlen, v, value,
                        "must be empty or \"/\" followed by up to 198 letters, digits, '.', "
                        "'_' or '-' (no other '/', and not \".\" or \"..\" alone)");
        return 0;
    case MG_CFG_LOG_LEVEL:
        for (int i = 0; i <= MG_LOG_DEBUG; i++) {
            if (strcasecmp(value, log_level_names[i]) == 0 ||
                (i == MG_LOG_WARN && strcasecmp(value, "warn") == 0)) {
                *(int32_t *)field = i;
                return 0;
            }
        }
        return fail(err, errlen, v, value, "must be error, warning, info or debug");
    case MG_CFG_ACCESS_LOG: {
        bool on;
        if (strcasecmp(value, "combined") == 0)
            *(int32_t *)field = MG_ACCESS_LOG_COMBINED;
        else if (strcasecmp(value, "json") == 0)
            *(int32_t *)field = MG_ACCESS_LOG_JSON;
        else if (parse_bool(value, &on) == 0)
            *(int32_t *)field = on ? MG_ACCESS_LOG_ON : MG_ACCESS_LOG_OFF;
        else
            return fail(err, errlen, v, value,
                        "must be 0 (off), 1 (on), combined or json (also: yes, no, true, "
                        "false, on, off)");
        return 0;
    }
    case MG_CFG_CIDRS: {
        char why[300];
        if (mg_cidr_list_parse(value, cidr_list_of(cfg, v), why, sizeof why) < 0)
            return fail(err, errlen, v, value, why);
        memcpy(field, value, strlen(value) + 1); /* parse checked the length */
        return 0;
    }
    }
    return fail(err, errlen, v, value, "has an unknown kind");
}

int mg_config_load(struct mg_config *cfg, mg_getenv_fn lookup, void *arg, char *err, size_t errlen)
{
    if (!lookup)
        lookup = env_lookup;
    memset(cfg, 0, sizeof *cfg);
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        const char *value = lookup(v->name, arg);
        if (!value) {
            if (!v->default_value) {
                snprintf(err, errlen, "%s is not set: %s", v->name, v->help);
                return -1;
            }
            value = v->default_value;
        }
        if (apply(cfg, v, value, err, errlen) < 0)
            return -1;
    }
    if (cfg->max_uri_bytes > cfg->max_header_bytes) {
        snprintf(err, errlen,
                 "MESHGATE_MAX_URI_BYTES=%d: must not exceed MESHGATE_MAX_HEADER_BYTES=%d",
                 cfg->max_uri_bytes, cfg->max_header_bytes);
        return -1;
    }
    /* The connection table keeps a record per connection the group can hold. */
    if (cfg->max_conns_per_client > 0 &&
        (int64_t)cfg->workers * cfg->max_conns_per_worker > MG_CONNS_TRACKED_MAX) {
        snprintf(err, errlen,
                 "MESHGATE_MAX_CONNS_PER_CLIENT=%d: must be 0 when MESHGATE_WORKERS x "
                 "MESHGATE_MAX_CONNS_PER_WORKER (%d x %d) exceeds %d connections",
                 cfg->max_conns_per_client, cfg->workers, cfg->max_conns_per_worker,
                 MG_CONNS_TRACKED_MAX);
        return -1;
    }
    return 0;
}

int mg_config_check_public_dir(const struct mg_config *cfg, char *err, size_t errlen)
{
    if (!cfg->public_dir[0])
        return 0;
    struct stat st;
    const char *why = NULL;
    if (cfg->public_dir[0] != '/')
        why = "must be an absolute path to a directory (or empty: no static files)";
    else if (stat(cfg->public_dir, &st) < 0)
        snprintf(err, errlen, "MESHGATE_PUBLIC_DIR=%s: must be an existing directory (%s)",
                 cfg->public_dir, strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        why = "must be a directory (or empty: no static files), not a file";
    else if (access(cfg->public_dir, R_OK | X_OK) < 0)
        snprintf(err, errlen, "MESHGATE_PUBLIC_DIR=%s: must be a directory meshgate may read (%s)",
                 cfg->public_dir, strerror(errno));
    else
        return 0;
    if (why)
        snprintf(err, errlen, "MESHGATE_PUBLIC_DIR=%s: %s", cfg->public_dir, why);
    return -1;
}

int mg_config_check_state_dir(const struct mg_config *cfg, char *err, size_t errlen)
{
    const char *dir = cfg->state_dir;
    if (!dir[0])
        return 0;
    struct stat st, db;
    char db_dir[MG_PATH_MAX];
    snprintf(db_dir, sizeof db_dir, "%s", cfg->db_path);
    char *slash = strrchr(db_dir, '/');
    if (slash)
        *(slash == db_dir ? slash + 1 : slash) = '\0';
    else
        snprintf(db_dir, sizeof db_dir, ".");
    const char *why = NULL;
    if (dir[0] != '/')
        why = "must be an absolute path to a directory (or empty: no state kept)";
    else if (stat(dir, &st) < 0)
        snprintf(err, errlen, "MESHGATE_STATE_DIR=%s: must be an existing directory (%s)", dir,
                 strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        why = "must be a directory (or empty: no state kept), not a file";
    else if (access(dir, R_OK | W_OK | X_OK) < 0)
        snprintf(err, errlen, "MESHGATE_STATE_DIR=%s: must be a directory meshgate may write (%s)",
                 dir, strerror(errno));
    else if (stat(db_dir, &db) == 0 && db.st_dev == st.st_dev && db.st_ino == st.st_ino)
        why = "must not be the database's directory (meshgate writes nothing there)";
    else
        return 0;
    if (why)
        snprintf(err, errlen, "MESHGATE_STATE_DIR=%s: %s", dir, why);
    return -1;
}

/* The largest value a variable's row accepts. */
static int row_max(const char *name)
{
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++)
        if (strcmp(v->name, name) == 0)
            return (int)v->max;
    return 0;
}

/* An "auto" value stays within what the variable accepts when written out: the start-up
 * log and meshgate-shm print the effective value, and with more than 512 workers half of
 * them would be past the range (and past what the gate's tables hold). */
static int auto_value(int want, const char *name)
{
    int max = row_max(name);
    return want > max ? max : want;
}

int mg_config_resolve(struct mg_config *cfg, char *warning, size_t warnlen)
{
    if (warnlen)
        warning[0] = '\0';
    if (cfg->reach_cold_queue == MG_CONFIG_AUTO) {
        int queue = cfg->workers / 2 - cfg->reach_cold_max;
        cfg->reach_cold_queue = auto_value(queue > 0 ? queue : 0, "MESHGATE_REACH_COLD_QUEUE");
    }
    if (cfg->anon_concurrency == MG_CONFIG_AUTO)
        cfg->anon_concurrency =
            auto_value(cfg->workers / 2 > 1 ? cfg->workers / 2 : 1, "MESHGATE_ANON_CONCURRENCY");
    /* Requests that wait in a gate's line are parked and hold no worker; what can hold a
     * worker's loop is an anonymous heavy request being handled, at most anon_concurrency
     * of them. As many as there are workers would leave light requests none. */
    if (cfg->anon_concurrency == 0)
        snprintf(warning, warnlen,
                 "MESHGATE_ANON_CONCURRENCY=0: anonymous heavy requests have no line and can "
                 "occupy every worker (meant for A/B measurements only)");
    else if (cfg->anon_concurrency >= cfg->workers)
        snprintf(warning, warnlen,
                 "MESHGATE_ANON_CONCURRENCY=%d with MESHGATE_WORKERS=%d: anonymous heavy "
                 "requests can occupy every worker and keep light requests waiting; keep it "
                 "below the number of workers",
                 cfg->anon_concurrency, cfg->workers);
    return 0;
}

/* Edit distance (insertions, deletions, substitutions, transpositions) of a[0..n) and b. */
static size_t distance(const char *a, size_t n, const char *b)
{
    size_t m = strlen(b);
    if (n > 63 || m > 63)
        return n > m ? n : m;
    size_t d[64][64];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

const char *mg_config_closest(const char *name, size_t n)
{
    const char *closest = mg_config_vars[0].name;
    size_t best = (size_t)-1;
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        size_t d = distance(name, n, v->name);
        if (d < best) {
            best = d;
            closest = v->name;
        }
    }
    return closest;
}

static bool known_var(const char *name, size_t n)
{
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++)
        if (strlen(v->name) == n && strncmp(v->name, name, n) == 0)
            return true;
    return false;
}

int mg_config_unknown(char *const *envp, char *out, size_t outlen)
{
    int count = 0;
    size_t used = 0;
    if (outlen)
        out[0] = '\0';
    for (char *const *e = envp; e && *e; e++) {
        if (strncmp(*e, "MESHGATE_", 9) != 0)
            continue;
        size_t n = strcspn(*e, "=");
        /* The test build also knows its hooks' variables (test_hooks.h); this one none. */
        if (known_var(*e, n) || mg_test_hooks_var(*e, n))
            continue;
        count++;
        if (used < outlen) {
            int w = snprintf(out + used, outlen - used, "%s%.*s (closest known name: %s)",
                             count > 1 ? ", " : "", (int)n, *e, mg_config_closest(*e, n));
            if (w > 0)
                used += (size_t)w;
        }
    }
    return count;
}

void mg_config_describe_var(const struct mg_config *cfg, const struct mg_config_var *v, char *text,
                            size_t cap)
{
    const char *field = (const char *)cfg + v->offset;
    switch (v->kind) {
    case MG_CFG_INT:
        snprintf(text, cap, "%s=%d", v->name, *(const int32_t *)field);
        break;
    case MG_CFG_INT_AUTO:
        if (*(const int32_t *)field == MG_CONFIG_AUTO)
            snprintf(text, cap, "%s=auto", v->name);
        else
            snprintf(text, cap, "%s=%d", v->name, *(const int32_t *)field);
        break;
    case MG_CFG_BOOL:
        snprintf(text, cap, "%s=%d", v->name, *(const bool *)field ? 1 : 0);
        break;
    case MG_CFG_STRING:
    case MG_CFG_PATH:
    case MG_CFG_SHM_NAME:
    case MG_CFG_CIDRS:
    case MG_CFG_HOSTPORT:
    case MG_CFG_ADDRESS:
    case MG_CFG_ROUTES:
        snprintf(text, cap, "%s=%.*s", v->name, (int)v->size, field);
        break;
    case MG_CFG_LISTEN:
        if (strchr(cfg->listen_host, ':'))
            snprintf(text, cap, "%s=[%s]:%u", v->name, cfg->listen_host, cfg->listen_port);
        else
            snprintf(text, cap, "%s=%s:%u", v->name, cfg->listen_host, cfg->listen_port);
        break;
    case MG_CFG_LOG_LEVEL:
        snprintf(text, cap, "%s=%s", v->name, mg_log_level_name(*(const int32_t *)field));
        break;
    case MG_CFG_ACCESS_LOG:
        snprintf(text, cap, "%s=%s", v->name, mg_access_log_name(*(const int32_t *)field));
        break;
    }
}

void mg_config_describe(const struct mg_config *cfg, void (*line)(const char *, void *), void *arg)
{
    char text[MG_PATH_MAX + 64];
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        mg_config_describe_var(cfg, v, text, sizeof text);
        line(text, arg);
    }
}

void mg_config_default_shm_name(const char *host, unsigned port, char *out, size_t outlen)
{
    char clean[MG_HOST_MAX];
    size_t j = 0;
    for (const char *p = host; *p && j + 1 < sizeof clean; p++)
        clean[j++] = (isalnum((unsigned char)*p) || *p == '.' || *p == '-') ? *p : '_';
    clean[j] = '\0';
    snprintf(out, outlen, "/meshgate-%s-%u", j ? clean : "any", port);
}

/* ---- sources: the environment, then MESHGATE_ENV_FILE ---------------------------------- */

#define ENV_FILE_VAR "MESHGATE_ENV_FILE"

static const char *source_env(const struct mg_config_sources *s, const char *name)
{
    return s->env ? s->env(name, s->env_arg) : getenv(name);
}

int mg_config_sources_init(struct mg_config_sources *s, mg_getenv_fn env, void *env_arg, char *err,
                           size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->env = env;
    s->env_arg = env_arg;
    const char *path = source_env(s, ENV_FILE_VAR);
    if (path && *path) {
        if (strlen(path) >= sizeof s->file_path) {
            snprintf(err, errlen, ENV_FILE_VAR "=%s: must be shorter than %zu bytes", path,
                     sizeof s->file_path);
            return -1;
        }
        snprintf(s->file_path, sizeof s->file_path, "%s", path);
        if (mg_envfile_read(&s->file, s->file_path, err, errlen) < 0)
            return -1;
    }
    size_t row = 0;
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++, row++) {
        const char *from_env = source_env(s, v->name);
        const char *from_file = mg_envfile_get(&s->file, v->name);
        /* Equal to the file's value: the file passed on by EnvironmentFile=, not an override. */
        s->env_wins[row] = from_env && !(from_file && strcmp(from_env, from_file) == 0);
    }
    return 0;
}

int mg_config_sources_reread(const struct mg_config_sources *s, struct mg_config_sources *next,
                             char *err, size_t errlen)
{
    *next = *s;
    memset(&next->file, 0, sizeof next->file);
    if (!s->file_path[0])
        return 0;
    return mg_envfile_read(&next->file, s->file_path, err, errlen);
}

void mg_config_sources_free(struct mg_config_sources *s)
{
    mg_envfile_free(&s->file);
}

static const char *sources_lookup(const char *name, void *arg)
{
    const struct mg_config_sources *s = arg;
    size_t row = 0;
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++, row++) {
        if (strcmp(v->name, name) != 0)
            continue;
        if (strcmp(name, ENV_FILE_VAR) == 0 || s->env_wins[row])
            return source_env(s, name);
        return mg_envfile_get(&s->file, name);
    }
    return source_env(s, name);
}

int mg_config_load_sources(struct mg_config *cfg, const struct mg_config_sources *s, char *err,
                           size_t errlen)
{
    /* A name no row knows is a typo that would silently leave its setting at the default. */
    for (size_t i = 0; i < s->file.count; i++) {
        const char *name = s->file.vars[i].name;
        size_t n = strlen(name);
        if (strncmp(name, "MESHGATE_", 9) == 0 && !known_var(name, n) &&
            !mg_test_hooks_var(name, n)) {
            snprintf(err, errlen,
                     "%s line %u: unknown variable %.100s (closest known name: %s); see "
                     "meshgate --help",
                     s->file_path, s->file.vars[i].line, name, mg_config_closest(name, n));
            return -1;
        }
    }
    return mg_config_load(cfg, sources_lookup, (void *)s, err, errlen);
}

int mg_config_sources_notes(const struct mg_config_sources *s, void (*line)(const char *, void *),
                            void *arg)
{
    char text[MG_PATH_MAX + 1000];
    int count = 0;
    for (size_t i = 0; i < s->file.count; i++) {
        const struct mg_envfile_var *fv = &s->file.vars[i];
        if (strncmp(fv->name, "MESHGATE_", 9) != 0 || strcmp(fv->name, ENV_FILE_VAR) == 0)
            continue;
        size_t row = 0;
        const struct mg_config_var *v;
        for (v = mg_config_vars; v->name && strcmp(v->name, fv->name) != 0; v++)
            row++;
        if (!v->name)
            continue; /* refused by mg_config_load_sources */
        const char *from_env = source_env(s, v->name);
        if (!s->env_wins[row] || !from_env || strcmp(from_env, fv->value) == 0)
            continue;
        snprintf(text, sizeof text,
                 "%s line %u: %s=%.300s is overridden by the process environment (%s=%.300s), "
                 "which wins over the file",
                 s->file_path, fv->line, v->name, fv->value, v->name, from_env);
        line(text, arg);
        count++;
    }
    return count;
}

static bool same_value(const struct mg_config *a, const struct mg_config *b,
                       const struct mg_config_var *v)
{
    if (v->kind == MG_CFG_LISTEN && a->listen_port != b->listen_port)
        return false;
    if (v->kind == MG_CFG_CIDRS || v->kind == MG_CFG_PATH || v->kind == MG_CFG_STRING ||
        v->kind == MG_CFG_SHM_NAME || v->kind == MG_CFG_LISTEN || v->kind == MG_CFG_HOSTPORT ||
        v->kind == MG_CFG_ADDRESS || v->kind == MG_CFG_ROUTES)
        return strncmp((const char *)a + v->offset, (const char *)b + v->offset, v->size) == 0;
    return memcmp((const char *)a + v->offset, (const char *)b + v->offset, v->size) == 0;
}

static void keep_running_value(const struct mg_config *running, struct mg_config *next,
                               const struct mg_config_var *v)
{
    memcpy((char *)next + v->offset, (const char *)running + v->offset, v->size);
    if (v->kind == MG_CFG_LISTEN)
        next->listen_port = running->listen_port;
    if (v->kind == MG_CFG_CIDRS)
        next->trusted_proxies = running->trusted_proxies;
}

int mg_config_keep_restart_settings(const struct mg_config *running, struct mg_config *next,
                                    unsigned worker_slots, void (*warn)(const char *, void *),
                                    void *arg)
{
    int kept = 0;
    char now[MG_PATH_MAX + 64], asked[MG_PATH_MAX + 64], text[2 * MG_PATH_MAX + 300];
    for (const struct mg_config_var *v = mg_config_vars; v->name; v++) {
        if (same_value(running, next, v))
            continue;
        const char *why = NULL;
        if (v->reload != MG_RELOAD_LIVE)
            why = "needs a restart";
        else if (strcmp(v->name, "MESHGATE_WORKERS") == 0 && worker_slots &&
                 next->workers > (int32_t)worker_slots)
            why = "needs a restart: more workers than the segment has slots for (the number at "
                  "start)";
        else if (strcmp(v->name, "MESHGATE_MAX_CONNS_PER_CLIENT") == 0 &&
                 (running->max_conns_per_client == 0) != (next->max_conns_per_client == 0))
            why = "needs a restart: turning the cap on or off resizes the connection table";
        if (!why)
            continue;
        mg_config_describe_var(next, v, asked, sizeof asked);
        keep_running_value(running, next, v);
        mg_config_describe_var(next, v, now, sizeof now);
        snprintf(text, sizeof text, "%s %s; keeping %s until then", asked, why, now);
        warn(text, arg);
        kept++;
    }
    return kept;
}

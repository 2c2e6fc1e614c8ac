/* SPDX-License-Identifier: ISC */
/*
 * config_values: struct mg_config, the effective configuration's values, and the limits its
 * fields are sized by. The master fills it from the MESHGATE_* variables (server/config.h,
 * the table of variables) and copies it into the segment as it is (it holds no pointers);
 * the segment, the gates and the workers read it through this header alone.
 */
#ifndef MESHGATE_CONFIG_VALUES_H
#define MESHGATE_CONFIG_VALUES_H

#include "netaddr.h"

#include <stdbool.h>
#include <stdint.h>

#define MG_PATH_MAX 1024
#define MG_SHM_NAME_MAX 200
#define MG_HOST_MAX 256
#define MG_WORKERS_MAX 1024
/* Connections the per-client table can follow: workers x connections per worker. */
#define MG_CONNS_TRACKED_MAX (1 << 20)

struct mg_config {
    /* listening */
    char listen_host[MG_HOST_MAX]; /* numeric IPv4/IPv6 address or a host name */
    uint16_t listen_port;
    int32_t backlog;
    /* database */
    char db_path[MG_PATH_MAX];
    int32_t db_busy_timeout_ms;
    /* processes */
    int32_t workers;
    char shm_name[MG_SHM_NAME_MAX]; /* empty: derived from the listen address */
    int32_t drain_timeout_ms;
    int32_t worker_stall_ms; /* a heartbeat older than this: the worker is killed */
    /* connections */
    int32_t header_timeout_ms;
    int32_t idle_timeout_ms;
    int32_t send_timeout_ms;
    int32_t max_requests_per_conn;
    int32_t max_conns_per_worker;
    int32_t max_conns_per_client;        /* group-wide, per peer address; 0: no cap */
    int32_t max_unread_bytes_per_client; /* per worker, per peer address; 0: no cap */
    int32_t shed_tarpit; /* shed connections a worker keeps open unread (worker.c); 0: none */
    int32_t max_header_bytes;
    int32_t max_uri_bytes;
    int32_t body_timeout_ms; /* a request body read before its request goes on: whole bound */
    int32_t body_min_rate;   /* bytes a second it must keep after body_grace_ms; 0: none */
    int32_t body_grace_ms;
    int32_t refusal_pace_max_ms; /* the longest a paced refusal is held (pacing.h); 0: none */
    /* responses */
    int32_t gzip_min_bytes;       /* 0 turns gzip off */
    char public_dir[MG_PATH_MAX]; /* empty: no static files */
    /* CoreScope's config.json, the source of the /api/config answers; empty: its defaults */
    char corescope_config[MG_PATH_MAX];
    /* who is signed in */
    char api_keys_file[MG_PATH_MAX]; /* empty: no keys, everyone is anonymous */
    /* the diagnostic gate (/api/perf?mem=1) */
    int32_t perf_mem_cooldown_ms;
    bool perf_mem_gate;
    /* reach reports: the cold-scan gate and the shared cache */
    int32_t reach_cold_max; /* 0: unlimited */
    int32_t reach_cold_wait_ms;
    int32_t reach_cold_queue;   /* MG_CONFIG_AUTO until resolved by mg_config_resolve */
    int32_t reach_cache_ttl_ms; /* 0: no caching */
    int32_t reach_cache_entries;
    int32_t reach_cache_bytes;
    /* /api/packets: per-transmission summaries shared by the group (1), or none (0) */
    int32_t tx_summaries;
    /* where the group's derived tables are kept across restarts (state_file.h); empty: not */
    char state_dir[MG_PATH_MAX];
    /* anonymous heavy requests: their line, and the per-client rate limit */
    int32_t anon_concurrency; /* MG_CONFIG_AUTO until resolved; 0: no line (A/B only) */
    int32_t anon_queue;
    int32_t anon_wait_ms;
    /* permits and places of the line one client may hold together; 0: no share */
    int32_t anon_per_client;
    int32_t anon_rate; /* requests a minute per client; 0: no limit */
    int32_t anon_burst;
    int32_t anon_clients; /* entries of the rate table */
    int32_t anon_nice;    /* CPU priority of the helper threads that run anonymous heavy work */
    /* the upstream (CoreScope's own server): what no native route answers goes there */
    char upstream[MG_HOST_MAX + 8];     /* HOST:PORT; empty: off */
    int32_t upstream_concurrency;       /* 0: no cap */
    int32_t upstream_signed_in_reserve; /* permits anonymous requests may not take */
    int32_t upstream_queue;
    int32_t upstream_wait_ms;
    char upstream_heavy[512];  /* path prefixes, comma-separated, '*' one segment */
    char upstream_prefer[512]; /* native route templates passed to the upstream instead */
    int32_t upstream_max_body_bytes;
    int32_t upstream_connect_timeout_ms;
    int32_t upstream_timeout_ms;
    int32_t upstream_idle_conns;
    int32_t upstream_breaker_failures;
    int32_t upstream_breaker_open_ms;
    char upstream_health_path[256]; /* what the breaker's own probe asks the upstream */
    int32_t upstream_websockets;
    int32_t upstream_websockets_per_client; /* tunnels of one counted client address; 0: no share */
    int32_t upstream_tunnel_idle_ms;        /* a tunnel silent this long is closed */
    int32_t upstream_relay_timeout_ms;      /* a whole proxied exchange, tunnels aside */
    int32_t live_clients;    /* the live feed's WebSocket clients in the group; 0: no feed */
    int32_t live_per_client; /* of them, one counted client address's; 0: no share */
    int32_t live_poll_ms;    /* how often the watcher asks the database for new rows */
    int32_t live_ping_ms;    /* a client silent this long is pinged; twice this: closed */
    char live_origins[512];  /* cross-origin pages allowed to open the live feed */
    /* X-Forwarded-For is believed only from these peers */
    char trusted_proxies_text[MG_CIDRS_TEXT_MAX];
    struct mg_cidr_list trusted_proxies;
    /* /server-status and /metrics answer clients from these networks (and signed-in ones) */
    char admin_networks_text[MG_CIDRS_TEXT_MAX];
    struct mg_cidr_list admin_networks;
    /* logging */
    int32_t log_level;  /* enum mg_log_level */
    int32_t access_log; /* enum mg_access_log */
    /* past one machine (docs/scale-out.md): HAProxy's agent-check port, its maintenance
     * file, and the lag past which a replica copy asks to be drained (0: not a replica) */
    char agent_listen[MG_HOST_MAX + 8]; /* empty: no agent port */
    char agent_maint_file[MG_PATH_MAX]; /* empty: none */
    int32_t replica_max_lag_ms;
    /* where the rest came from, besides the environment (envfile.h); empty: nowhere */
    char env_file[MG_PATH_MAX];
};

/* MESHGATE_ACCESS_LOG: none, meshgate's own line, Apache's combined format, or JSON. */
enum mg_access_log {
    MG_ACCESS_LOG_OFF = 0,
    MG_ACCESS_LOG_ON,
    MG_ACCESS_LOG_COMBINED,
    MG_ACCESS_LOG_JSON
};

#define MG_CONFIG_AUTO (-1)

#endif

#include "reclaim.h"

#include "client_limit.h"
#include "clock.h"
#include "conn_limit.h"
#include "gate_diag.h"
#include "gate_fifo.h"
#include "result_cache.h"
#include "shared_value.h"

unsigned mg_segment_reclaim(struct mg_segment *seg, unsigned slot, int pid)
{
    unsigned freed = 0;
    for (unsigned i = 0; i < MG_VALUE_COUNT; i++)
        freed += mg_shared_value_reclaim(&seg->values[i], pid) ? 1u : 0u;
    freed += mg_diag_gate_reclaim(seg->diag, pid, mg_monotonic_ns()) ? 1u : 0u;
    freed += mg_fifo_gate_reclaim(seg->cold, pid);
    freed += mg_result_cache_reclaim(&seg->cache, pid);
    freed += mg_fifo_gate_reclaim(seg->anon, pid);
    freed += mg_client_limit_reclaim(&seg->clients, pid);
    freed += mg_conn_limit_reclaim(&seg->conns, pid, slot);
    return freed;
}

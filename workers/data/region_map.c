/* SPDX-License-Identifier: ISC */
#include "region_map.h"

#include "clock.h"
#include "group_table.h"
#include "result_cache.h"
#include "table_stats.h"

#include <stddef.h>

static struct mg_group_table shared =
    MG_GROUP_TABLE_INIT(.table = &mg_region_table, .name = "regions", .what = "region map",
                        .version = MG_REGION_TABLE_VERSION, .build = mg_region_table_build,
                        .encode = mg_region_table_encode, .decode = mg_region_table_decode,
                        .builds = offsetof(struct mg_result_cache, region_builds),
                        .copies = offsetof(struct mg_result_cache, region_copies), .lazy = true,
                        .stats = MG_TABLE_regions);

void mg_region_map_adopt(struct mg_env *env)
{
    mg_group_table_adopt(&shared, env);
}

bool mg_region_map_available(struct mg_env *env)
{
    return mg_group_table_available(&shared, env);
}

int mg_region_map_keep(struct mg_env *env, int64_t now_ns, bool *busy)
{
    return mg_group_table_keep(&shared, env, now_ns, mg_realtime_ns(), busy);
}

void mg_region_map_forget(struct mg_env *env)
{
    mg_group_table_forget(&shared, env);
}

/* SPDX-License-Identifier: ISC */
#include "result_body.h"

#include "answer_cache.h"
#include "clock.h"

/* Appends a pinned body to out; false when the copy is not valid (nothing appended). */
static bool append_pinned(struct mg_cache_view *v, int pid, const struct mg_cache_pin *pin,
                          struct mg_buf *out)
{
    void *dst = mg_buf_reserve(out, pin->len) ? out->data + out->len : NULL;
    bool whole = mg_result_cache_copy(v, pid, pin, dst);
    if (whole && dst) {
        out->len += pin->len;
        mg_cached_bytes_copied_add(pin->len);
    }
    return whole && dst;
}

static enum mg_cache_outcome look_into(struct mg_cache_view *v, int pid, unsigned slot,
                                       const char *key, int64_t now, bool count, struct mg_buf *out,
                                       uint64_t *build_id)
{
    for (;;) {
        struct mg_cache_pin pin;
        enum mg_cache_outcome r =
            mg_result_cache_look(v, pid, slot, key, now, count, &pin, build_id);
        if (r != MG_CACHE_HIT || append_pinned(v, pid, &pin, out))
            return r;
        if (out->failed)
            return MG_CACHE_HIT; /* out of memory: the buffer says so */
        count = false;           /* rebuilt while copied: look again, counted once */
    }
}

enum mg_cache_outcome mg_result_cache_lookup(struct mg_cache_view *v, int pid, unsigned slot,
                                             const char *key, int64_t now, struct mg_buf *out,
                                             uint64_t *build_id)
{
    return look_into(v, pid, slot, key, now, true, out, build_id);
}

enum mg_cache_outcome mg_result_cache_relook(struct mg_cache_view *v, int pid, unsigned slot,
                                             const char *key, int64_t now, struct mg_buf *out,
                                             uint64_t *build_id)
{
    return look_into(v, pid, slot, key, now, false, out, build_id);
}

enum mg_cache_outcome mg_result_cache_wait(struct mg_cache_view *v, int pid, unsigned slot,
                                           const char *key, int64_t deadline,
                                           mg_fifo_cancel_fn cancel, void *cancel_arg,
                                           struct mg_buf *out, uint64_t *build_id)
{
    for (;;) {
        struct mg_cache_pin pin;
        enum mg_cache_outcome r = mg_result_cache_wait_pin(v, pid, slot, key, deadline, cancel,
                                                           cancel_arg, &pin, build_id);
        if (r != MG_CACHE_HIT || append_pinned(v, pid, &pin, out) || out->failed)
            return r;
        if (mg_monotonic_ns() >= deadline)
            return look_into(v, pid, slot, key, mg_monotonic_ns(), false, out, build_id);
    }
}

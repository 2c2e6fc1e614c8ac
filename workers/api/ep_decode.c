/* SPDX-License-Identifier: ISC */
/*
 * POST /api/decode: CoreScope's packet decoder (its handleDecode), the tool its Packets page
 * opens to decode a pasted packet. The body is {"hex": "..."}; the answer is
 * {"decoded":{"header":...,"path":...,"payload":...}}, the ADVERT's signature checked
 * (packet_decode.h), or 400 with CoreScope's message.
 *
 * The body as CoreScope's decoder reads it: the first JSON value (what follows is not read),
 * an object whose key folds to "hex" (the last such that is a string; null leaves it as it
 * was) or null; anything else, and a "hex" that is neither a string nor null, is 400
 * "invalid JSON body". Where jansson and Go's decoder differ (invalid UTF-8 or a lone
 * surrogate escape in a string, \u0000 in a key, a number beyond a double or an int64
 * anywhere in the body)
 * this refuses the body with the same 400 where CoreScope reads on; the front end sends
 * neither.
 *
 * Light: no database, one body of at most MG_DECODE_BODY_MAX bytes read once, one packet of
 * at most 254 bytes decoded and one Ed25519 verification.
 */
#include "packet_decode.h"
#include "router.h"

#include <jansson.h>
#include <strings.h>

enum mg_turn mg_handle_decode(struct mg_env *env, const struct mg_request *req,
                              struct mg_response *res)
{
    (void)env;
    json_error_t jerr;
    json_t *root = json_loadb(req->body.ptr ? req->body.ptr : "", req->body.len,
                              JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL, &jerr);
    json_t *hex = NULL;
    bool ok = root && (json_is_null(root) || json_is_object(root));
    if (ok && json_is_object(root)) {
        const char *key;
        json_t *value;
        json_object_foreach(root, key, value)
        {
            if (strcasecmp(key, "hex") != 0 || json_is_null(value))
                continue;
            if (!json_is_string(value))
                ok = false;
            else
                hex = value;
        }
    }
    if (!ok) {
        json_decref(root);
        mg_response_error(res, 400, "invalid JSON body");
        return MG_DONE;
    }
    char err[256];
    mg_response_json(res, 200);
    if (!mg_packet_decode_answer(hex ? json_string_value(hex) : "",
                                 hex ? json_string_length(hex) : 0, true, &res->body, err,
                                 sizeof err)) {
        mg_response_error(res, 400, "%s", err);
    }
    json_decref(root);
    return MG_DONE;
}

/* SPDX-License-Identifier: ISC */
/*
 * sha256: SHA-256 (FIPS 180-4) of a byte string, for the checks CoreScope makes with it (a
 * channel's name against the hash byte its packets carry). Not for secrets: no effort is made
 * to run in constant time or to wipe state.
 */
#ifndef MESHGATE_SHA256_H
#define MESHGATE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define MG_SHA256_BYTES 32

void mg_sha256(const void *data, size_t len, uint8_t out[MG_SHA256_BYTES]);

#endif

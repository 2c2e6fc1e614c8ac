#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""Writes the request list for recording CoreScope's answers to POST /api/decode
(tests/corescope-decode.json, with tools/corescope-record-post.py --text).

usage: tools/corescope-decode-requests.py DB OUT.json

Sets:
  real        every transmission's raw_hex of DB, in id order (every payload type it has);
  built       packets built here for what DB lacks: every payload type and its short forms,
              the transport routes, zero-hop direct paths, TRACE flags, ADVERT app data
              (features, names with NULs, control characters, UTF-8 cut at 32 bytes, HTML
              characters), and every refusal of the packet (path encodings, lengths);
  text        the hex text: white space trimmed and dropped, case, bad characters, odd length;
  bodies      the JSON body: not JSON, not an object, no "hex", "hex" of other types, key case,
              trailing text;
  signatures  ADVERTs signed with the Ed25519 key whose seed is the bytes 00 01 .. 1f
              (tests/test_decode.c signs the same ones with Nettle): valid, a signature bit
              flipped, the app data changed; and the identity public key (a small-order
              point) with the signature R = identity, S = 0, which Go's crypto/ed25519 and
              Nettle both accept (libsodium refuses small-order keys);
  differences the two public-key encodings of the identity that Go's crypto/ed25519 decodes
              and Nettle refuses (a non-canonical y, and x = 0 with the sign bit set): the
              only known answers where meshgate says signatureValid false and CoreScope true;
  methods     GET /api/decode (CoreScope's router passes it to its front end's index.html).
"""
import json
import sqlite3
import struct
import sys


def body(hexstr):
    return json.dumps({"hex": hexstr})


def post(b):
    return ["POST", "/api/decode", b]


def h(*parts):
    """Hex of the parts: ints are bytes, bytes and str (hex) are as given."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += "%02X" % p
        elif isinstance(p, bytes):
            out += p.hex().upper()
        else:
            out += p
    return out


def header(route, ptype, version=0):
    return route | ptype << 2 | version << 6


def built():
    pk = bytes(range(0x40, 0x60))  # a key (no valid signature)
    ts = struct.pack("<I", 1796536800)
    sig = bytes(range(0x80, 0xC0))
    loc = struct.pack("<ii", 37774929, -122419416)
    adv = lambda app, ts=ts: h(header(1, 4), 0, pk, ts, sig, app)
    p = []
    # Every payload type, flood, no hops, with its minimum and more.
    for t in (0, 1, 2):
        p += [h(header(1, t), 0, "AABBCC"), h(header(1, t), 0, "AABBCCDD"),
              h(header(1, t), 0, "AABBCCDD00112233445566778899")]
    p += [h(header(1, 3), 0, "010203"), h(header(1, 3), 0, "01020304"),
          h(header(1, 3), 0, "0102030405"), h(header(1, 3), 0, "010203040506"),
          h(header(1, 3), 0, "0102030405060708")]
    for t in (5, 6):
        p += [h(header(1, t), 0, "00AA"), h(header(1, t), 0, "00AABB"),
              h(header(1, t), 0, "ABAABB"), h(header(1, t), 0, "0011223344556677")]
    p += [h(header(1, 7), 0, bytes(34)), h(header(1, 7), 0, "AA", pk, "BBCC"),
          h(header(1, 7), 0, "AA", pk, "BBCC", "DDEEFF")]
    p += [h(header(1, 8), 0, "AABBCC"), h(header(1, 8), 0, "AABBCCDD"),
          h(header(1, 8), 0, "AABBCCDD0102")]
    # TRACE: short, no hops, each hop size, hops of SNR bytes, two-byte header hops, a flood.
    tr = "78563412EFBEADDE"
    p += [h(header(2, 9), 0, "0102030405060708"), h(header(2, 9), 0, tr, 0),
          h(header(2, 9), 0, "0000000000000000", 0, "AABB"),
          h(header(2, 9), 3, "F0081C", tr, 0, "A1B2C3D4"),
          h(header(2, 9), 2, "E410", tr, 1, "A1B2C3D4E5"),
          h(header(2, 9), 1, "80", tr, 2, "A1B2C3D4E5F60718"),
          h(header(2, 9), 0, tr, 3, "A1B2C3D4E5F60718293A"),
          h(header(2, 9), 0x42, "11112222", tr, 0, "A1B2"),
          h(header(1, 9), 2, "0C7F", tr, 0, "A1B2C3"),
          h(header(3, 9), "1234ABCD", 1, "14", tr, 0, "A1")]
    # MULTIPART: each inner type, ACKs of each length.
    p += [h(header(1, 10), 0), h(header(1, 10), 0, "23"), h(header(1, 10), 0, "23010203"),
          h(header(1, 10), 0, "2301020304"), h(header(1, 10), 0, "230102030405"),
          h(header(1, 10), 0, "23010203040506"), h(header(1, 10), 0, "2301020304050607"),
          h(header(1, 10), 0, "F4AABBCC"), h(header(1, 10), 0, "0C"), h(header(1, 10), 0, "1F99")]
    # CONTROL, RAW_CUSTOM, the three unknown types.
    p += [h(header(2, 11), 0), h(header(2, 11), 0, "80"), h(header(2, 11), 0, "11223344"),
          h(header(1, 15), 0), h(header(1, 15), 0, "7E"), h(header(1, 15), 0, "7E010203")]
    for t in (12, 13, 14):
        p += [h(header(1, t), 0), h(header(1, t), 0, "DEADBEEF")]
    # Routes and versions: transport codes, zero-hop direct paths, version bits.
    p += [h(header(0, 5), "1234ABCD", 0x41, "AABB", "11AABB0102"),
          h(header(3, 2), "1234ABCD", 0, "AABBCCDD01"), h(header(3, 2), "1234ABCD", 0x40, "AABBCCDD"),
          h(header(2, 2), 0, "AABBCCDD01"), h(header(2, 2), 0x80, "AABBCCDD"),
          h(header(2, 2), 0x81, "A1A2A3", "AABBCCDD"), h(header(1, 2), 0x40, "AABBCCDD"),
          h(header(1, 5, 1), 0, "11AABB00"), h(header(1, 5, 3), 0, "11AABB00"),
          h(header(1, 2), 0x60, bytes(range(64)), "AABBCCDD"),
          h(header(1, 2), 0x95, bytes(range(63)), "AABBCCDD")]
    # ADVERTs: short, no app data, flags only, location, features, names.
    p += [h(header(1, 4), 0, pk, ts, sig[:63]), adv(""), adv("01"), adv("02"), adv("10"),
          adv(h(0x12, loc)), adv(h(0x12, loc[:7])), adv(h(0x32, loc, "0102")), adv(h(0x72, loc, "0102", "0304")),
          adv(h(0x62, "01", "N")), adv(h(0xF2, loc, "0102", "0304", b"All four")),
          adv(h(0x81, b"Plain name")), adv(h(0x81)), adv(h(0x81, b"Nul ended\x00\x00")),
          adv(h(0x81, b"a\x00b\x01c\x1fd\x7fe\tf\ng\rh")), adv(h(0x81, b"<b>&amp;</b> \xe2\x80\xa8 q")),
          adv(h(0x81, "C3", b"bad \xff utf8 \xc0\xaf over \xed\xa0\x80 surrogate")),
          adv(h(0x81, "ABCDEFGHIJKLMNOPQRSTUVWXYZ01234567890".encode().hex())),
          adv(h(0x81, ("a" * 30 + "\u00e9\u00e9").encode().hex())),
          adv(h(0x81, ("ab" * 15 + "\U0001F3D4").encode().hex())),
          adv(h(0x81, b"\xc2\x80 C1 \xc2\x9f controls")),
          adv(h(0x80, b"type 0")), adv(h(0x85, b"type 5")), adv(h(0x8F, b"type 15")),
          adv(h(0x84, b"sensor")), adv(h(0x83, b"room")),
          adv(h(0x92, struct.pack("<ii", 0, -1), b"zero")),
          adv(h(0x92, struct.pack("<ii", 2147483647, -2147483648), b"far")),
          adv(h(0x92, struct.pack("<ii", 1, 123456789), b"small")),
          adv(h(0x81, b"x"), ts=bytes(4)), adv(h(0x81, b"x"), ts=b"\xff\xff\xff\xff"),
          h(header(1, 4), 0, pk, ts, sig, 0x81, bytes(84 - 1)),
          h(header(1, 4), 0, pk, ts, sig, 0x81, b"y" * 83)]
    # Refusals: lengths, transport codes, path encodings, payload over 184 bytes.
    p += ["01", "11", h(header(0, 2), "1234"), h(header(0, 2), "12345678"),
          h(header(3, 2), "123456"), "1140", "11C0", "11C1AABBCCDD", "11FF", "117F", "1161",
          h(header(1, 2), 0x45, "AABBCCDD"), h(header(1, 2), 0x82, "AABB"),
          h(header(1, 2), 0, bytes(184)), h(header(1, 2), 0, bytes(185)),
          h(header(0, 2), "12345678", 0x50, bytes(32), bytes(186)),
          h(header(1, 2), 0, bytes(600))]
    return [post(body(x)) for x in p]


def text():
    t = ["", " ", "\t\n\r \u00a0\u3000\u2003\u0085", "0100", "01 00", " 1100AABB ",
         "\u3000\u0085 0D00\n01020304\r\n \u2028", "0d00aabbccdd", "0D00aAbBcCdD",
         "0D0\t0AABBCCDD", "0D00AABBCCDDg", "0D00AABBCCDDG1", "xyz", "0D00AABBCCD",
         "0D00AABBCCDD0", "0D00AABBCC<D", "0D00AABBCC>", "0D00&", "0D00\u00e9\u00e9",
         "0D00\u00a0AABB", "0D00\u0000AA", "0D00\u007fAA", "0D00\u0001AA", "0D00\u000bAA",
         "0D00'", "0D00 \"", "0D00\\", "0D00AAB\u00ad", "g", "0", "0\u00a0", "\u00a0\u00a0"]
    return [post(body(x)) for x in t]


def bodies():
    b = ['{"hex":"0D0001020304"}', '{"HEX":"0D0001020304"}', '{"Hex":"0D0001020304"}',
         '{"hex":"0D0001020304","hex":"0D0005060708"}', '{"hex":"0D0001020304","HEX":null}',
         '{"hex":null}', '{}', 'null', '{"hex":"0D0001020304"} trailing',
         '{"hex":"0D0001020304"}{"hex":"00"}', '{"other":[1,{"a":null}],"hex":"0D0001020304"}',
         '', ' ', 'not json', '[]', '["0D0001020304"]', '"0D0001020304"', '12', 'true',
         '{"hex":12}', '{"hex":true}', '{"hex":["0D00"]}', '{"hex":{}}', '{"hex":"0D00"',
         '{"hex":"0D0001020304",}', '{"hex":"0D0001020304","other":1e5}',
         '{"hex":"\\u0030\\u0044\\u0030\\u0030\\u0030\\u0031\\u0030\\u0032\\u0030\\u0033\\u0030\\u0034"}']
    return [post(x) for x in b]


# Signed with seed 00 01 .. 1f (tests/test_decode.c makes the same with Nettle).
SIGNED_FLOOD = (
    "110003A107BFF3CE10BE1D70DD18E74BC09967E4D6309BA50D5F1DDC8664125531B8E0F9146BDF80F300BF7E7B"
    "AEDF560CC575AFCD4406A219B4A775A6C4B6773073CF74D2F9D2979F54FCFE53E1A0EEFDB157D589E31EA95F8B"
    "A0EE87D348E583A446D1050392516640022807B4F86D657368676174652074657374")
SIGNED_DIRECT = (
    "120003A107BFF3CE10BE1D70DD18E74BC09967E4D6309BA50D5F1DDC8664125531B8E0F9146BAAD44B1A15758B"
    "C2F51BCCD4AC526B591A5073145A915280A09D0AA0F8C6B6FF49F99953B530240BF0C1FD5C3A1B86E12E6B157C"
    "BFD1C685EE07E331F9D43B0781636F6D70616E696F6E")


def flip(hexstr, byte_at, mask=1):
    b = bytearray.fromhex(hexstr)
    b[byte_at] ^= mask
    return b.hex().upper()


IDENTITY = "01" + "00" * 31
IDENTITY_SIGNED = "01" + "00" * 30 + "80"  # the sign bit set on x = 0
IDENTITY_NONCANONICAL = "EE" + "FF" * 30 + "7F"  # y = p + 1


def small_order_advert(key):
    return h(header(1, 4), 0, key, struct.pack("<I", 1796536800), IDENTITY, "00" * 32, 0x81,
             b"small order")


def signatures():
    s = [SIGNED_FLOOD, SIGNED_DIRECT, flip(SIGNED_FLOOD, 2 + 36 + 5), flip(SIGNED_FLOOD, 2 + 36 + 63, 0x80),
         flip(SIGNED_FLOOD, len(SIGNED_FLOOD) // 2 - 1), flip(SIGNED_FLOOD, 2 + 33),
         flip(SIGNED_FLOOD, 2 + 3), small_order_advert(IDENTITY)]
    return [post(body(x)) for x in s]


def differences():
    return [post(body(small_order_advert(IDENTITY_SIGNED))),
            post(body(small_order_advert(IDENTITY_NONCANONICAL)))]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    db = sqlite3.connect("file:%s?mode=ro" % sys.argv[1], uri=True)
    real = [post(body(r[0])) for r in
            db.execute("SELECT raw_hex FROM transmissions WHERE raw_hex IS NOT NULL ORDER BY id")]
    sets = {"real": real, "built": built(), "text": text(), "bodies": bodies(),
            "signatures": signatures(), "differences": differences(),
            "methods": [["GET", "/api/decode", None]]}
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(sets, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()

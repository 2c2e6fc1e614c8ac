/* SPDX-License-Identifier: ISC */
/* The one definition of meshgate's version. */
#ifndef MESHGATE_VERSION_H
#define MESHGATE_VERSION_H

#define MESHGATE_VERSION "0.1.0"

#endif

/* The native client's server: the card that names it, and the checks before it is trusted.
 * Written by hand: see native.h and place.c. */
#ifndef STOCKADE_PLACE_H
#define STOCKADE_PLACE_H

#include <limits.h>

#include "native.h"

struct card {
    char version[256]; /* protocol.VERSION of the Python client that left the card */
    char socket[PATH_MAX];
    char token[PATH_MAX]; /* the file that holds the server's secret */
};

/* The card the Python client left for this program (`self`: its real path) and this
 * environment; 0 when there is one to read. */
int read_card(const char *self, struct card *card);
/* 0 when every folder from the socket's up to "/" passes stockade.server.trust's checks. */
int folder_trusted(const char *socket_path);
/* A connection to the socket, its folders checked before and its listener's uid
 * (SO_PEERCRED) after; -1 when nothing listens there or a check fails. */
int connect_trusted(const char *socket_path);

#endif

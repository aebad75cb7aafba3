#ifndef VDRIVE_CPOSTGRES_SHIM_H
#define VDRIVE_CPOSTGRES_SHIM_H
/* libpq from Debian's libpq-dev (pkg-config libpq: -I/usr/include/postgresql). */
#include <libpq-fe.h>

/* PG_DIAG_* are character macros in postgres_ext.h; named here so Swift reads them as ints. */
static inline int vd_pg_diag_sqlstate(void) { return PG_DIAG_SQLSTATE; }
static inline int vd_pg_diag_message_primary(void) { return PG_DIAG_MESSAGE_PRIMARY; }
static inline int vd_pg_diag_message_detail(void) { return PG_DIAG_MESSAGE_DETAIL; }
#endif

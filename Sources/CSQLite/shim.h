#ifndef VDRIVE_CSQLITE_SHIM_H
#define VDRIVE_CSQLITE_SHIM_H
#include <sqlite3.h>

/* SQLITE_TRANSIENT is a macro over a cast function pointer; Swift cannot import it. */
static inline int vd_sqlite3_bind_text_transient(sqlite3_stmt *s, int i, const char *text, int n) {
    return sqlite3_bind_text(s, i, text, n, SQLITE_TRANSIENT);
}
static inline int vd_sqlite3_bind_blob_transient(sqlite3_stmt *s, int i, const void *b, int n) {
    return sqlite3_bind_blob(s, i, b, n, SQLITE_TRANSIENT);
}
#endif

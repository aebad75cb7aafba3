#ifndef VDRIVE_CMICROHTTPD_SHIM_H
#define VDRIVE_CMICROHTTPD_SHIM_H
#include <stdint.h>
#include <stdarg.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>
#endif

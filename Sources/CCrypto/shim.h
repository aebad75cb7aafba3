#ifndef VDRIVE_CCRYPTO_SHIM_H
#define VDRIVE_CCRYPTO_SHIM_H
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#endif

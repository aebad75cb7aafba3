#ifndef VDRIVE_CCRYPTO_SHIM_H
#define VDRIVE_CCRYPTO_SHIM_H
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/err.h>

/* A server's TLS certificate and key, both PEM, checked before the server starts with them.
   0: usable; 1: no certificate in cert; 2: no private key in key (or it is encrypted);
   3: the key is not the certificate's; 4: the certificate has expired; 5: not yet valid.
   The key is read with an empty pass phrase, so an encrypted key fails here instead of
   OpenSSL asking on the terminal. */
static inline int vd_tls_pair_check(const char *cert, int cert_len, const char *key, int key_len) {
    int result = 0;
    BIO *cb = BIO_new_mem_buf(cert, cert_len);
    BIO *kb = BIO_new_mem_buf(key, key_len);
    X509 *x = cb ? PEM_read_bio_X509(cb, NULL, NULL, (void *)"") : NULL;
    EVP_PKEY *k = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, (void *)"") : NULL;
    if (!x) result = 1;
    else if (!k) result = 2;
    else if (X509_check_private_key(x, k) != 1) result = 3;
    else if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0) result = 4;
    else if (X509_cmp_current_time(X509_get0_notBefore(x)) > 0) result = 5;
    EVP_PKEY_free(k);
    X509_free(x);
    BIO_free(kb);
    BIO_free(cb);
    ERR_clear_error();
    return result;
}
#endif

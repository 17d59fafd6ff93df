# wire: the HTTP client's TLS tests make a self-signed certificate with openssl's command line.
APT_PACKAGES += openssl

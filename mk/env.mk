# env: coding-agent RL environments (issue 6). Sandboxed commands need bubblewrap; prlimit and
# setpriv come with util-linux.
APT_PACKAGES += bubblewrap util-linux

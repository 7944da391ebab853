# test/clients/clients.mk — include from the top-level Makefile:
#     include test/clients/clients.mk
#     check: ... clients clients-selftest
# Needs gcc and libibverbs-dev. Builds $(BIN)/ucmclient; `clients32` builds
# the static 32-bit $(BIN)/ucmclient32 without libibverbs (gcc-multilib).

BIN ?= bin
UCMCLIENT_CC ?= gcc
UCMCLIENT_CFLAGS ?= -O2 -Wall -Wextra -Werror -std=gnu11

.PHONY: clients clients32 clients-selftest

clients: $(BIN)/ucmclient

$(BIN)/ucmclient: test/clients/ucmclient.c test/clients/ucm_abi.h
	@mkdir -p $(BIN)
	$(UCMCLIENT_CC) $(UCMCLIENT_CFLAGS) -o $@ test/clients/ucmclient.c -libverbs -lpthread

clients32: $(BIN)/ucmclient32

$(BIN)/ucmclient32: test/clients/ucmclient.c test/clients/ucm_abi.h
	@mkdir -p $(BIN)
	$(UCMCLIENT_CC) $(UCMCLIENT_CFLAGS) -m32 -static -DUCMCLIENT_NO_VERBS -o $@ test/clients/ucmclient.c -lpthread

# The LD_PRELOAD shim that shows libibcm programs ucmd's class tree
# (dist/preload): into bin/ for the tests, bin/pkg/ for the package.
%/libucmd-sysfs.so: dist/preload/ucmd-sysfs.c
	@mkdir -p $(@D)
	$(UCMCLIENT_CC) $(UCMCLIENT_CFLAGS) -shared -fPIC -o $@ dist/preload/ucmd-sysfs.c -ldl

# No RDMA, no daemon needed: layouts, wire images, argument parsing, discovery.
clients-selftest: $(BIN)/ucmclient $(BIN)/libucmd-sysfs.so
	test/clients/selftest.sh $(BIN)/ucmclient $(BIN)/libucmd-sysfs.so

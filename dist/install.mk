# dist/install.mk — included from the top-level Makefile.
#   make pkg                                      build what install copies (as yourself)
#   make install [PREFIX=/usr/local] [DESTDIR=]   static binary, unit, udev rule,
#                                                 man pages, completions, the
#                                                 LD_PRELOAD shim; builds nothing
#   make uninstall                                the same files, removed
#   make deb [VERSION=...]                        bin/ucmd_<version>_<arch>.deb (dpkg-deb)
#   make deb-test                                 the package in the test VM:
#                                                 install, upgrade, remove, purge
# Installing enables nothing: systemctl daemon-reload; systemctl enable ucmd; reboot.

PREFIX      ?= /usr/local
DESTDIR     ?=
SBINDIR     ?= $(PREFIX)/sbin
MANDIR      ?= $(PREFIX)/share/man
UNITDIR     ?= $(PREFIX)/lib/systemd/system
UDEVRULESDIR ?= $(PREFIX)/lib/udev/rules.d
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR  ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
LIBDIR      ?= $(PREFIX)/lib/ucmd
SYSCONFDIR  ?= /etc
DOCDIR      ?= $(PREFIX)/share/doc/ucmd
VERSION     ?= $(shell git log -1 --format='0.0~git%cd.%h' --date=format:%Y%m%d%H%M%S 2>/dev/null || echo 0.0)
DEBARCH     ?= $(shell $(GO) env GOARCH)

PKG := $(BIN)/pkg

.PHONY: pkg install uninstall man completions deb deb-test

# Static (CGO_ENABLED=0), stripped, the version stamped in.
$(PKG)/ucmd: FORCE
	@mkdir -p $(PKG)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w -X main.version=$(VERSION)' -o $@ ./cmd/ucmd

# One man page (section 8) per command, from the cobra commands themselves.
man: $(PKG)/ucmd
	@rm -rf $(PKG)/man && mkdir -p $(PKG)/man
	CGO_ENABLED=0 $(GO) run -tags gendocs -ldflags '-X main.version=$(VERSION)' ./cmd/ucmd gendocs $(PKG)/man

completions: $(PKG)/ucmd
	@mkdir -p $(PKG)/completions
	$(PKG)/ucmd completion bash > $(PKG)/completions/ucmd.bash
	$(PKG)/ucmd completion zsh > $(PKG)/completions/_ucmd
	$(PKG)/ucmd completion fish > $(PKG)/completions/ucmd.fish

# $(PKG)/libucmd-sysfs.so: the LD_PRELOAD shim for libibcm programs started
# without ucmd exec (dist/preload; its rule is in test/clients/clients.mk;
# needs gcc). The static binary cross-builds with GOARCH; the shim needs
# that architecture's C compiler (UCMCLIENT_CC).
pkg: pkg-arch $(PKG)/ucmd man completions $(PKG)/libucmd-sysfs.so

.PHONY: pkg-arch
pkg-arch:
	@host=$$($(GO) env GOHOSTARCH); if [ "$(DEBARCH)" != "$$host" ] && [ "$(UCMCLIENT_CC)" = gcc ]; then \
		echo "make pkg for $(DEBARCH) on a $$host host: the LD_PRELOAD shim needs a C compiler for $(DEBARCH): UCMCLIENT_CC=..." >&2; exit 1; fi

# install copies what pkg built and builds nothing: `sudo make install`
# rebuilt as root, fetched the Go toolchain into root's cache and left
# root's files in bin/, where the next `make` as yourself failed.
install:
	@if [ ! -x $(PKG)/ucmd ] || [ ! -d $(PKG)/man ] || [ ! -d $(PKG)/completions ] || [ ! -f $(PKG)/libucmd-sysfs.so ]; then \
		echo "make install: nothing built to install: run 'make pkg' first (as yourself), then 'sudo make install'" >&2; exit 1; fi
	install -D -m 0755 $(PKG)/ucmd $(DESTDIR)$(SBINDIR)/ucmd
	install -D -m 0644 $(PKG)/libucmd-sysfs.so $(DESTDIR)$(LIBDIR)/libucmd-sysfs.so
	install -d -m 0755 $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MANDIR)/man8
	sed 's|/usr/local/sbin/ucmd|$(SBINDIR)/ucmd|' dist/ucmd.service > $(DESTDIR)$(UNITDIR)/ucmd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/ucmd.service
	install -D -m 0644 dist/90-ucmd.rules $(DESTDIR)$(UDEVRULESDIR)/90-ucmd.rules
	install -m 0644 $(PKG)/man/*.8 $(DESTDIR)$(MANDIR)/man8/
	install -D -m 0644 $(PKG)/completions/ucmd.bash $(DESTDIR)$(BASHCOMPDIR)/ucmd
	install -D -m 0644 $(PKG)/completions/_ucmd $(DESTDIR)$(ZSHCOMPDIR)/_ucmd
	install -D -m 0644 $(PKG)/completions/ucmd.fish $(DESTDIR)$(FISHCOMPDIR)/ucmd.fish
	@# the documents the code and `ucmd conformance` cite (docs/*.md)
	install -d -m 0755 $(DESTDIR)$(DOCDIR)/docs
	install -m 0644 README.md $(DESTDIR)$(DOCDIR)/
	install -m 0644 docs/*.md $(DESTDIR)$(DOCDIR)/docs/
	@# a configuration file is the administrator's: never overwritten
	@if [ ! -e $(DESTDIR)$(SYSCONFDIR)/default/ucmd ]; then \
		install -D -m 0644 dist/ucmd.default $(DESTDIR)$(SYSCONFDIR)/default/ucmd; fi
	@echo "installed under $(DESTDIR)$(PREFIX); nothing enabled: systemctl daemon-reload && systemctl enable ucmd, then reboot (see README, Installing)"

uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/ucmd $(DESTDIR)$(LIBDIR)/libucmd-sysfs.so $(DESTDIR)$(UNITDIR)/ucmd.service $(DESTDIR)$(UDEVRULESDIR)/90-ucmd.rules \
		$(DESTDIR)$(MANDIR)/man8/ucmd.8 $(DESTDIR)$(MANDIR)/man8/ucmd-*.8 \
		$(DESTDIR)$(BASHCOMPDIR)/ucmd $(DESTDIR)$(ZSHCOMPDIR)/_ucmd $(DESTDIR)$(FISHCOMPDIR)/ucmd.fish
	rm -rf $(DESTDIR)$(DOCDIR)
	@echo "left $(DESTDIR)$(SYSCONFDIR)/default/ucmd in place"

# The Debian package: the install above into a staging root (Debian paths),
# gzipped man pages, the maintainer scripts of dist/deb, dpkg-deb.
DEBROOT := $(BIN)/deb/root
deb: pkg
	rm -rf $(BIN)/deb && mkdir -p $(DEBROOT)/DEBIAN
	$(MAKE) --no-print-directory install DESTDIR=$(CURDIR)/$(DEBROOT) PREFIX=/usr \
		UNITDIR=/lib/systemd/system UDEVRULESDIR=/lib/udev/rules.d \
		ZSHCOMPDIR=/usr/share/zsh/vendor-completions VERSION='$(VERSION)' >/dev/null
	gzip -9n $(DEBROOT)/usr/share/man/man8/*.8
	install -D -m 0644 LICENSE $(DEBROOT)/usr/share/doc/ucmd/copyright
	install -m 0755 dist/deb/postinst dist/deb/prerm dist/deb/postrm $(DEBROOT)/DEBIAN/
	echo /etc/default/ucmd > $(DEBROOT)/DEBIAN/conffiles
	{ echo 'Package: ucmd'; echo 'Version: $(VERSION)'; echo 'Architecture: $(DEBARCH)'; \
	  echo 'Maintainer: ucmd developers <ucmd@localhost>'; echo 'Section: net'; echo 'Priority: optional'; \
	  echo "Installed-Size: $$(du -sk --exclude=DEBIAN $(DEBROOT) | cut -f1)"; \
	  echo "Depends: libc6 (>= $$(objdump -T $(PKG)/libucmd-sysfs.so | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1 | cut -d_ -f2))"; \
	  echo 'Recommends: kmod'; echo 'Suggests: rdma-core'; \
	  echo 'Homepage: https://github.com/ucmd/ucmd'; \
	  echo 'Description: userspace /dev/infiniband/ucmN (the removed ib_ucm driver) over CUSE'; \
	  echo ' ucmd brings back the legacy ib_ucm device for libibcm programs without a'; \
	  echo ' kernel module: it serves /dev/infiniband/ucmN through CUSE and runs the'; \
	  echo ' InfiniBand connection manager itself over umad (InfiniBand and RoCE).'; \
	  echo ' Installing it enables nothing: systemctl enable ucmd, then reboot.'; \
	} > $(DEBROOT)/DEBIAN/control
	dpkg-deb --root-owner-group -Zxz --build $(DEBROOT) $(BIN)/ucmd_$(VERSION)_$(DEBARCH).deb

# In the test VM: two versions built here, then install, upgrade, remove,
# purge of the package in the guest (test/vm/deb-test.sh).
deb-test:
	@./test/vm/deb-test.sh

FORCE:

# The test VM booted by systemd (PID 1) with the package installed and
# ucmd.service enabled, rdma-core's units active (test/vm/boot-test.sh).
.PHONY: boot-test
boot-test:
	@./test/vm/boot-test.sh

# The maintainer scripts are POSIX sh: part of make vet.
.PHONY: vet-dist
vet: vet-dist
vet-dist:
	@if command -v shellcheck >/dev/null; then shellcheck -s sh dist/deb/postinst dist/deb/prerm dist/deb/postrm; fi

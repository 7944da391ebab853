package cuse

import (
	"fmt"
	"log/slog"
	"runtime"
	"strings"

	"github.com/ucmd/ucmd/cuse/internal/wire"
)

// Config describes the device to register.
type Config struct {
	// DevName is the node's path under /dev, e.g. "infiniband/ucm0";
	// devtmpfs creates missing directories. It must be unique among CUSE
	// devices.
	DevName string

	// Major and Minor fix the device number (the historic ucm0 is
	// 231:224). Major 0 asks the kernel for a dynamic one.
	Major, Minor uint32

	// MaxRead and MaxWrite bound the size of one READ or WRITE request; a
	// larger read(2) or write(2) reaches the device split into several.
	// 0 means DefaultMaxIO. The kernel raises values below 4096 to 4096
	// and gains nothing above 128 KiB (fc->max_pages).
	MaxRead, MaxWrite uint32

	// Logger receives protocol problems (malformed requests, failed
	// replies). nil means slog.Default().
	Logger *slog.Logger

	// Node is where the device node appears, "" meaning /dev/DevName.
	// Close opens it to wake the readers blocked in read(2): on
	// /dev/cuse only a request wakes them.
	Node string

	// IdleReaders is how many reader threads may wait in read(2) for the
	// next request at once; one more is started while they all serve, and
	// those beyond it exit once they have answered. 0 means max(4,
	// GOMAXPROCS); more than 1,024 count as 1,024. Each waiting reader
	// holds one of the Go runtime's Ps, so a caller that adds Ps for them
	// (see Server.MaxBlockedReaders) sets this from its CPUs, not from
	// GOMAXPROCS: derived from the Ps added for them, the readers would
	// grow with every Server started after the first and hold the new Ps
	// too. 1 makes every request start a reader and another exit (the
	// waiting reader takes it and starts the next; once answered it is
	// one too many): 2 or more reuse the readers.
	IdleReaders int
}

// node is Node or its default.
func (c Config) node() string {
	if c.Node != "" {
		return c.Node
	}
	return "/dev/" + c.DevName
}

// DefaultMaxIO is the default MaxRead and MaxWrite.
const DefaultMaxIO = 64 << 10

const minMaxIO = 4096

// maxIdleReaders caps Config.IdleReaders: each is a thread and a 64 KiB
// buffer, and the kernel wakes one reader per request anyway.
const maxIdleReaders = 1024

func (c Config) withDefaults() Config {
	if c.MaxRead == 0 {
		c.MaxRead = DefaultMaxIO
	}
	if c.MaxWrite == 0 {
		c.MaxWrite = DefaultMaxIO
	}
	// Mirror the kernel's clamp so our buffers match what it will send.
	c.MaxRead = max(c.MaxRead, minMaxIO)
	c.MaxWrite = max(c.MaxWrite, minMaxIO)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.IdleReaders == 0 {
		c.IdleReaders = max(4, runtime.GOMAXPROCS(0))
	}
	c.IdleReaders = min(c.IdleReaders, maxIdleReaders)
	return c
}

func (c Config) validate() error {
	name := c.DevName
	switch {
	case name == "":
		return fmt.Errorf("cuse: empty DevName")
	case strings.ContainsAny(name, "\x00\n \t"):
		return fmt.Errorf("cuse: DevName %q contains NUL or whitespace", name)
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/"):
		return fmt.Errorf("cuse: DevName %q must be relative to /dev, without a trailing slash", name)
	case len(c.info()) > wire.CUSE_INIT_INFO_MAX:
		return fmt.Errorf("cuse: DevName %q is too long", name)
	case c.IdleReaders < 0:
		return fmt.Errorf("cuse: IdleReaders %d is negative", c.IdleReaders)
	}
	for _, elem := range strings.Split(name, "/") {
		if elem == "" || elem == "." || elem == ".." {
			return fmt.Errorf("cuse: DevName %q has an empty, . or .. element", name)
		}
	}
	return nil
}

// info is the CUSE_INIT info blob: packed NUL-terminated KEY=VALUE strings;
// DEVNAME is the only key the kernel knows.
func (c Config) info() []byte {
	return []byte("DEVNAME=" + c.DevName + "\x00")
}

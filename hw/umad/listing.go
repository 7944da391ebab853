package umad

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Listing returns a token for what the RDMA classes in sysfs list now: the
// name and inode number of each entry of class/infiniband and
// class/infiniband_mad. It costs two directory reads, where Discover reads
// a few attributes of every device and umad port.
//
// A device is listed through a class link that the kernel makes when it
// registers the device (and ib_umad one for each umad port), and sysfs
// numbers each new kernfs node afresh: its ids are allocated cyclically
// and carry a generation, so a link made again has another inode number
// even under the same name. Equal tokens therefore mean the same
// registrations of the same devices and umad ports, and what Discover
// found for them still stands, except what a driver changes in place
// (Discover's callers look again now and then; docs/hotplug.md).
func Listing(opts Options) (string, error) {
	opts = opts.withDefaults()
	sys := sysfs{root: opts.SysfsRoot}
	var b strings.Builder
	for _, class := range []string{"infiniband", "infiniband_mad"} {
		b.WriteString(class)
		b.WriteByte(':')
		if err := listInodes(sys.path(class), &b); err != nil && !errors.Is(err, unix.ENOENT) {
			return "", fmt.Errorf("list %s: %w", sys.path(class), err)
		}
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// listInodes appends " name=inode" for each entry of dir but . and .., in
// the order getdents64 returns them (sysfs: a fixed order for one set of
// entries).
func listInodes(dir string, b *strings.Builder) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if err := appendDirents(buf[:n], b); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
	}
}

// linux_dirent64: d_ino u64, d_off s64, d_reclen u16, d_type u8, d_name.
const direntNameOff = 19

// appendDirents appends the entries of one getdents64 buffer.
func appendDirents(buf []byte, b *strings.Builder) error {
	for len(buf) > 0 {
		if len(buf) < direntNameOff {
			return fmt.Errorf("short dirent: %d bytes", len(buf))
		}
		reclen := int(binary.NativeEndian.Uint16(buf[16:]))
		if reclen < direntNameOff || reclen > len(buf) {
			return fmt.Errorf("dirent record length %d of %d bytes left", reclen, len(buf))
		}
		name := buf[direntNameOff:reclen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		if s := string(name); s != "." && s != ".." {
			b.WriteByte(' ')
			b.WriteString(s)
			b.WriteByte('=')
			b.WriteString(strconv.FormatUint(binary.NativeEndian.Uint64(buf), 10))
		}
		buf = buf[reclen:]
	}
	return nil
}

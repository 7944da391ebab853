package abi

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// ne is the order of the kernel's host-order fields; be that of __be fields.
var (
	ne = binary.NativeEndian
	be = binary.BigEndian
)

// Struct is implemented by pointers to every wire struct of the package.
type Struct interface {
	// Size is the C sizeof of the struct.
	Size() int
	// Encode writes the struct to b[:Size()], reserved bytes as zero.
	// It panics if len(b) < Size(), like binary.ByteOrder.PutUint32.
	Encode(b []byte)
	// Decode reads the struct from b. Bytes beyond len(b) read as zero,
	// so Decode accepts any input; reserved bytes are ignored.
	Decode(b []byte)
}

// grow extends b by n bytes and returns the result and the new n bytes.
// The window may hold stale bytes; every Encode writes all of its bytes.
func grow(b []byte, n int) (out, window []byte) {
	l := len(b)
	b = slices.Grow(b, n)[:l+n]
	return b, b[l:]
}

// checkLen is the length check of every UnmarshalBinary, which unlike Decode
// wants exactly the struct.
func checkLen(name string, size int, b []byte) error {
	if len(b) != size {
		return fmt.Errorf("abi: struct %s is %d bytes, got %d", name, size, len(b))
	}
	return nil
}

// fit returns b[:n] and panics if len(b) < n; a plain b[:n] would silently
// reach into spare capacity.
func fit(b []byte, n int) []byte { return b[:n:len(b)] }

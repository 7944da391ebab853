// Command ucmd serves the legacy /dev/infiniband/ucmN devices from userspace.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "ucmd:", err)
		os.Exit(1)
	}
}

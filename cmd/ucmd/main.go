// Command ucmd serves the legacy /dev/infiniband/ucmN devices from userspace.
package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/ucmd/ucmd/internal/journal"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		prefix := ""
		if journal.IsStream(os.Stderr) {
			prefix = journal.Priority(slog.LevelError)
		}
		fmt.Fprintln(os.Stderr, prefix+"ucmd:", err)
		os.Exit(exitStatus(err))
	}
}

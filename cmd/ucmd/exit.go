package main

import (
	"errors"
	"io/fs"
	"os/exec"
)

// Exit statuses other than 1, as Unix tools use them: 64 (sysexits.h's
// EX_USAGE) for a command line ucmd cannot run (a flag, an argument), so
// that systemd's RestartPreventExitStatus=64 stops a unit whose
// /etc/default/ucmd is wrong instead of restarting it into its start
// limit (not 2, which the Go runtime exits with after a panic or the
// SIGABRT of systemd's watchdog: those must restart); and exec's as env(1) and
// chroot(1): 125 when ucmd itself failed, 126 when PROGRAM was found but
// cannot run, 127 when it was not found. A wrapper or a batch system can
// then tell ucmd's failure from the program's own exit status 1. And 69
// (EX_UNAVAILABLE) when serve finds the kernel's CM on every port it
// could serve: restarting cannot help until an administrator unloads it
// or reboots, so the unit stops there too (RestartPreventExitStatus).
const (
	exitUsage       = 64
	exitUnavailable = 69
	exitExecFailed  = 125
	exitCannotRun   = 126
	exitNotFound    = 127
	exitOtherErrors = 1
)

// exitError is an error with the status ucmd exits with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withStatus gives err the status code, unless it has one already.
func withStatus(code int, err error) error {
	if _, ok := errors.AsType[*exitError](err); ok || err == nil {
		return err
	}
	return &exitError{code: code, err: err}
}

// usage marks err as a command-line error.
func usage(err error) error { return withStatus(exitUsage, err) }

// exitStatus is the status ucmd exits with for err.
func exitStatus(err error) int {
	if e, ok := errors.AsType[*exitError](err); ok {
		return e.code
	}
	return exitOtherErrors
}

// programStatus is exec's status for a program that could not be run.
func programStatus(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotRun
}

// nothp: run a program with transparent huge pages disabled for it and its
// children (PR_SET_THP_DISABLE survives execve). make perf measures the
// daemon's RSS growth per held connection this way: with THP the Go heap's
// RSS moves in 2 MiB steps, 4 KiB a connection at 500 connections.
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: nothp PROGRAM [ARG...]\n");
		return 2;
	}
	if (prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0) {
		perror("nothp: prctl(PR_SET_THP_DISABLE)");
		return 1;
	}
	execvp(argv[1], argv + 1);
	perror(argv[1]);
	return 127;
}

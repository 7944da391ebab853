/* SPDX-License-Identifier: MIT */
/*
 * guestcpu.h — the guest's busy CPU time around a timed part, for the
 * make perf programs (docs/perf.md, "A bound with many in flight"). With
 * many connections in flight the test VM's two vCPUs are the limit, so a
 * rate is made of the CPU each connection costs everyone: the client, the
 * daemon, the kernel's threads and interrupts. Reported as guest_cpu_us=,
 * µs of busy CPU (all CPUs) per unit of the program's work.
 */
#ifndef UCMD_GUESTCPU_H
#define UCMD_GUESTCPU_H

#include <stdio.h>
#include <unistd.h>

/* guest_busy_ticks is the time all CPUs spent on anything but idle and
 * iowait (user, nice, system, irq, softirq, steal of /proc/stat's cpu
 * line), in clock ticks; -1 if it cannot be read. */
static long long guest_busy_ticks(void)
{
	unsigned long long v[8] = { 0 };
	FILE *f = fopen("/proc/stat", "r");
	if (!f)
		return -1;
	int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
		       &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	if (n != 8)
		return -1;
	return (long long)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
}

/* guest_cpu_us turns the ticks between two readings into µs per unit; a
 * negative result means a reading failed. */
static double guest_cpu_us(long long before, long long after, double units)
{
	long hz = sysconf(_SC_CLK_TCK);
	if (before < 0 || after < 0 || units <= 0 || hz <= 0)
		return -1;
	return (double)(after - before) * 1e6 / (double)hz / units;
}

#endif

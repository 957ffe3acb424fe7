/* numa.h -- the CPUs next to a GPU, and binding a rank's thread to them. On a two-socket 8-GPU
 * node half the GPUs hang off each socket: a rank thread left to roam pins its host memory
 * (cudaHostAlloc touches the pages from the calling thread, and Linux places a page on the node of
 * the CPU that first touches it) and runs its host AdamW threads on whichever socket it lands on,
 * so offloaded traffic crosses the socket link. Binding the rank thread to its GPU's CPUs before
 * it allocates puts both on the GPU's side; the threads it starts later inherit the binding.
 * Linux sysfs only (no libnuma): /sys/bus/pci/devices/<bus id>/{local_cpulist,numa_node}.
 * Host-only; the CPU tests parse cpulists and read a fake sysfs tree. */
#ifndef LONGCTX_NUMA_H
#define LONGCTX_NUMA_H

#include <stddef.h>

#define NUMA_MAX_CPUS 4096

/* "0-27,56-83" -> mask[cpu] = 1 for each listed cpu (mask of max bytes, zeroed first); the number
 * of CPUs listed, or -1 for a malformed list or a cpu >= max */
int cpulist_parse(const char *s, unsigned char *mask, int max);
/* the CPUs (mask, NUMA_MAX_CPUS bytes) and NUMA node of a PCI device, from sysfs under root
 * ("/sys" normally); bus_id as CUDA prints it ("0000:1A:00.0", any case). CPUs listed, or -1. */
int numa_device_cpus(const char *root, const char *bus_id, unsigned char *mask, int *node);
/* Bind the calling thread to the CPUs of mask that it may run on now (its current affinity, e.g.
 * a scheduler's cgroup, is respected). Returns the CPUs bound to, or 0 (left as it was) when the
 * two sets do not meet or are already the same. desc: a short description for the log. */
int numa_bind_thread(const unsigned char *mask, char *desc, size_t n);

#endif

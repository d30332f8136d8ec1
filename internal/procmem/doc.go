// Package procmem reads what the operating system says about this process's
// memory and the machine's: the process's peak resident set (to set beside
// the allocator's accounting) and the memory the process may use at most
// (physical memory, or a cgroup's limit when lower), from which the CPU
// device's default capacity follows. Where the system does not say (not
// Linux), the functions report that they do not know rather than guess.
package procmem

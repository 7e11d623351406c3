//go:build !linux

package launch

import "syscall"

// setParentDeathSignal does nothing where the kernel has no parent-death
// signal: there a child outlives a parent killed with SIGKILL, and only an
// orderly Stop ends it.
func setParentDeathSignal(*syscall.SysProcAttr) {}

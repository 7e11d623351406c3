package launch

import "syscall"

// setParentDeathSignal makes the kernel send the child SIGKILL when the
// thread that forked it exits (see startLocked). Go sets it after switching
// to Spec.Credential, which would otherwise clear it.
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

package launch

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// starter is the one goroutine that forks children.
var starter struct {
	once sync.Once
	reqs chan startReq
}

type startReq struct {
	cmd  *exec.Cmd
	errc chan error
}

// startLocked starts cmd in its own process group with the parent-death
// signal set, from the starter goroutine.
//
// Linux sends the parent-death signal when the *thread* that forked the
// child exits, not when the process does. The Go runtime runs goroutines on
// whichever thread is free and ends a thread while the process lives on (a
// goroutine that exits while locked to its thread takes the thread with
// it), so a child forked from an arbitrary goroutine could be killed at a
// random moment while owedctl runs on. Every child is therefore forked by
// one goroutine locked to its OS thread for the life of the process: that
// thread never runs anything else and exits only with the process, which is
// exactly when the children must die.
func startLocked(cmd *exec.Cmd) error {
	starter.once.Do(func() {
		starter.reqs = make(chan startReq)
		go func() {
			// Never unlocked: the thread must live as long as the process.
			runtime.LockOSThread()
			for r := range starter.reqs {
				r.errc <- r.cmd.Start()
			}
		}()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Its own group: a terminal's Ctrl-C reaches the parent alone, and a
	// signal to the group reaches whatever the child forks.
	cmd.SysProcAttr.Setpgid = true
	setParentDeathSignal(cmd.SysProcAttr)
	errc := make(chan error, 1)
	starter.reqs <- startReq{cmd: cmd, errc: errc}
	return <-errc
}

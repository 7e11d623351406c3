package devstack

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"syscall"
)

// Ports handed out by ReservePorts lie below Linux's default ephemeral range
// (32768–60999), so an outgoing connection of any process is never given one
// between the check and the child's bind.
const (
	reservedPortMin = 20000
	reservedPortMax = 32000
)

// ReservePorts picks n loopback ports for a stack's children and holds them
// until release is called. A port is taken only when it is free and an
// exclusive lock on its file in the temporary folder can be had, so stacks
// started at the same time by different processes (the drill's and the dev
// stack's tests run in parallel) never pick the same port; asking the kernel
// for port 0 and closing it, as before, left a window in which another stack
// got the same port.
func ReservePorts(n int) (ports []int, release func(), err error) {
	var locks []*os.File
	release = func() {
		for _, f := range locks {
			f.Close() // closing the file drops its lock
		}
	}
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			release()
			return nil, nil, errors.New("reserve ports: no free port found in 1000 tries")
		}
		p := reservedPortMin + rand.IntN(reservedPortMax-reservedPortMin)
		f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("owed-port-%d.lock", p)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			release()
			return nil, nil, fmt.Errorf("reserve ports: %w", err)
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close()
			continue
		}
		ln, err := net.Listen("tcp", addr(p))
		if err != nil {
			f.Close()
			continue
		}
		ln.Close()
		locks = append(locks, f)
		ports = append(ports, p)
	}
	return ports, release, nil
}

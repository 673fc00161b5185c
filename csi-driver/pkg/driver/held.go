package driver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The FUSE connection of every staged volume is kept by the plugin, not
// only by pdfs-fuse (docs/csi.md "Mounts and the node plugin's lifetime"):
// the plugin opens /dev/fuse, mounts with the descriptor (fd=N) and starts
// pdfs-fuse on a copy (--fuse-fd). The kernel keeps a connection while any
// copy is open, so when pdfs-fuse dies the mount stays, its requests wait,
// and the plugin starts another pdfs-fuse on its copy, which resumes the
// connection (pdfs-fuse --init-file). A restarted plugin takes the copy
// back from the running pdfs-fuse (pidfd_getfd) and supervises it again.

// fuseFD is the descriptor number pdfs-fuse serves the connection on (the
// first of exec.Cmd's ExtraFiles).
const fuseFD = 3

// heldConnection is one staged volume's FUSE connection and the pdfs-fuse
// serving it.
type heldConnection struct {
	dev  *os.File // the plugin's copy of the /dev/fuse descriptor
	args []string // pdfs-fuse's arguments (without the descriptor flags)
	base string   // the staging record's path without suffix

	mu      sync.Mutex
	pid     int  // the serving pdfs-fuse, 0 while none runs
	stopped bool // unstaging: do not start another
	gone    chan struct{}
}

// running tells whether a pdfs-fuse serves the connection now.
func (h *heldConnection) running() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pid != 0
}

// connections: the held connections by volume id.
type connections struct {
	mu sync.Mutex
	m  map[string]*heldConnection
}

func (c *connections) get(volumeID string) *heldConnection {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[volumeID]
}

func (c *connections) put(volumeID string, h *heldConnection) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*heldConnection{}
	}
	c.m[volumeID] = h
}

func (c *connections) remove(volumeID string) *heldConnection {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.m[volumeID]
	delete(c.m, volumeID)
	return h
}

// mountHeld opens /dev/fuse and mounts it on path: the connection
// pdfs-fuse will serve.
func mountHeld(path string) (*os.File, error) {
	dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	// What pdfs-fuse asks libfuse for when it mounts itself.
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,default_permissions,allow_other", dev.Fd())
	if err := unix.Mount("pdfs", path, "fuse.pdfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		dev.Close()
		return nil, fmt.Errorf("mount %s: %w", path, err)
	}
	return dev, nil
}

// startFuse starts a pdfs-fuse serving h's connection, in its own session
// (a signal to the plugin's process group leaves it serving), its output
// appended to the volume's log.
func (n *Node) startFuse(h *heldConnection) (*exec.Cmd, error) {
	logFile, err := os.OpenFile(h.base+".log", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the mount's log: %w", err)
	}
	defer logFile.Close()
	args := append(append([]string{}, h.args...), "--fuse-fd", fmt.Sprint(fuseFD), "--init-file", h.base+".init")
	cmd := exec.Command(n.FuseBinary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.ExtraFiles = []*os.File{h.dev}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", n.FuseBinary, err)
	}
	return cmd, nil
}

// supervise waits for the serving pdfs-fuse to exit (wait) and, unless
// the volume is being unstaged, starts another on the held connection;
// returns once unstaged. A pdfs-fuse that cannot start is retried every
// second (the mount's requests wait meanwhile).
func (n *Node) supervise(volumeID string, h *heldConnection, wait func() error) {
	defer close(h.gone)
	for {
		err := wait()
		h.mu.Lock()
		h.pid = 0
		stopped := h.stopped
		h.mu.Unlock()
		if stopped {
			return
		}
		n.Log.Warn("pdfs-fuse exited: starting another on the held connection", "volume", volumeID, "exit", fmt.Sprint(err))
		for {
			time.Sleep(time.Second)
			h.mu.Lock()
			stopped = h.stopped
			h.mu.Unlock()
			if stopped {
				return
			}
			cmd, err := n.startFuse(h)
			if err != nil {
				n.Log.Error("cannot restart pdfs-fuse", "volume", volumeID, "error", err)
				continue
			}
			h.mu.Lock()
			h.pid = cmd.Process.Pid
			h.mu.Unlock()
			n.updateRecordPID(volumeID, cmd.Process.Pid)
			wait = cmd.Wait
			break
		}
	}
}

// updateRecordPID records the serving pdfs-fuse's pid (so a restarted
// plugin finds it).
func (n *Node) updateRecordPID(volumeID string, pid int) {
	r, err := n.loadRecord(volumeID)
	if err != nil || r == nil {
		n.Log.Warn("cannot update the staging record", "volume", volumeID, "error", fmt.Sprint(err))
		return
	}
	r.PID = pid
	if err := n.writeRecord(r); err != nil {
		n.Log.Warn("cannot update the staging record", "volume", volumeID, "error", err)
	}
}

// adopt takes back the connection of a pdfs-fuse an earlier plugin started
// (still serving): a copy of its descriptor (pidfd_getfd) and a watch on
// its exit (pidfd). False when that is not possible (the mount then serves
// until that pdfs-fuse ends, and is restored in place after).
func (n *Node) adopt(r *stageRecord, args []string) bool {
	pidfd, err := unix.PidfdOpen(r.PID, 0)
	if err != nil {
		n.Log.Warn("cannot watch the running pdfs-fuse", "volume", r.VolumeID, "pid", r.PID, "error", err)
		return false
	}
	fd, err := unix.PidfdGetfd(pidfd, fuseFD, 0)
	if err != nil {
		unix.Close(pidfd)
		n.Log.Warn("cannot take the FUSE connection back from pdfs-fuse", "volume", r.VolumeID, "pid", r.PID, "error", err)
		return false
	}
	h := &heldConnection{dev: os.NewFile(uintptr(fd), "/dev/fuse"), args: args, base: n.recordPath(r.VolumeID),
		pid: r.PID, gone: make(chan struct{})}
	n.held.put(r.VolumeID, h)
	waitExit := func() error {
		defer unix.Close(pidfd)
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				return err
			}
		}
	}
	go n.supervise(r.VolumeID, h, waitExit)
	return true
}

// release stops supervising a volume's connection, unmounts it (pdfs-fuse
// then ends on its own), waits for pdfs-fuse (killing it after a while)
// and closes the plugin's copy. Nothing held: only the unmount.
func (n *Node) release(volumeID, path string) error {
	h := n.held.remove(volumeID)
	if h != nil {
		h.mu.Lock()
		h.stopped = true
		h.mu.Unlock()
	}
	if mounted, _ := isMounted(path); mounted {
		if err := unix.Unmount(path, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			if err := detach(path); err != nil {
				return fmt.Errorf("unmount %s: %w", path, err)
			}
		}
	}
	if h == nil {
		return nil
	}
	select {
	case <-h.gone:
	case <-time.After(10 * time.Second):
		h.mu.Lock()
		pid := h.pid
		h.mu.Unlock()
		if pid != 0 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		<-h.gone
	}
	return h.dev.Close()
}

// Package hotspot names the code a running HotSpot JVM generated. First
// from the JVM's own memory (CodeCache, codecache.go), with nothing asked
// of it; where that cannot be read, it asks the JVM (JDK 17 and later) to
// write its perf map, /tmp/perf-PID.map, through the JVM's attach
// mechanism: the request `jcmd PID Compiler.perfmap` makes, sent by the
// agent itself. Either way a Java service's JIT-compiled methods are named
// with no flag or tool on the application's side.
//
// The attach mechanism (HotSpot's attachListener_linux.cpp): the JVM listens
// on a Unix socket, /tmp/.java_pidN (N the pid the JVM sees, in its own /tmp),
// once it has been asked to. To ask, a client creates the trigger file
// .attach_pidN in the JVM's working directory or /tmp, owned by the JVM's
// effective user or root, and sends it SIGQUIT; the JVM's signal handler finds the
// file and starts the listener. A request is "1\0" (protocol version), the
// command ("jcmd\0") and three arguments, each NUL-terminated; the answer is
// a result code on its own line, then the command's output.
package hotspot

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hotpath-dev/hotpath/internal/procfile"
)

// listenerWait bounds the wait for the JVM's listener after SIGQUIT: the
// JVM starts it on its signal dispatcher thread, in milliseconds; a JVM
// started with -XX:+DisableAttachMechanism never does.
const listenerWait = 5 * time.Second

// JVM is what RequestPerfMap needs to know of the process.
type JVM struct {
	PID   int    // as the agent sees it
	NSPID int    // as the JVM sees it (innermost PID namespace): the files' names
	UID   uint32 // effective: the attach socket's owner
	// CatchesSIGQUIT: the JVM has a handler for SIGQUIT. Without one (a
	// JVM started with -Xrs, or one whose start has not installed it yet)
	// SIGQUIT's default action would kill the process.
	CatchesSIGQUIT bool
}

// ReadJVM reads pid's ids and signal handlers from procRoot/PID/status.
func ReadJVM(procRoot string, pid int) (JVM, error) {
	st, err := procfile.ReadStatus(filepath.Join(procRoot, strconv.Itoa(pid), "status"))
	if err != nil {
		return JVM{}, fmt.Errorf("process %d: %w", pid, err)
	}
	return JVM{PID: pid, NSPID: st.NSPID, UID: st.UID, CatchesSIGQUIT: st.Handles(int(unix.SIGQUIT))}, nil
}

// PerfMapFile is a perf map that a JVM wrote on request into a file that
// did not exist before: the requester's to remove once the JVM is gone.
// HotSpot leaves its map behind when it exits, so JVMs that come and go (a
// CI runner's builds) would leave one file each in their /tmp.
type PerfMapFile struct {
	dir  int // the JVM's /tmp
	name string
	id   fileIdentity
}

// fileIdentity tells a file from another of the same name: a file system
// hands a freed inode number to the next file created, so the number alone
// does not; its birth time does, where the file system records one.
type fileIdentity struct {
	dev, ino uint64
	born     unix.StatxTimestamp // zero where not recorded
}

// identify returns the identity of dir/name, which must be a regular file.
func identify(dir int, name string) (fileIdentity, error) {
	var stx unix.Statx_t
	if err := unix.Statx(dir, name, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_TYPE|unix.STATX_INO|unix.STATX_BTIME, &stx); err != nil {
		return fileIdentity{}, err
	}
	if stx.Mode&unix.S_IFMT != unix.S_IFREG {
		return fileIdentity{}, fmt.Errorf("/tmp/%s is not a regular file", name)
	}
	id := fileIdentity{dev: unix.Mkdev(stx.Dev_major, stx.Dev_minor), ino: stx.Ino}
	if stx.Mask&unix.STATX_BTIME != 0 {
		id.born = stx.Btime
	}
	return id, nil
}

// Remove deletes the map if the file is still the one the JVM wrote (not
// replaced since), and releases f.
func (f *PerfMapFile) Remove() error {
	defer unix.Close(f.dir)
	id, err := identify(f.dir, f.name)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil || id != f.id {
		return nil // another file by that name now: not the one requested
	}
	if err := unix.Unlinkat(f.dir, f.name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("perf map /tmp/%s: %w", f.name, err)
	}
	return nil
}

// Close releases f and leaves the file.
func (f *PerfMapFile) Close() { unix.Close(f.dir) }

// RequestPerfMap asks the JVM to write its perf map (Compiler.perfmap) and
// returns once it has, or with the reason it did not. The JVM writes the
// code that exists at that moment; code compiled later needs another request.
// When the request created the file (none was there before), it returns it
// (see PerfMapFile); nil otherwise. procRoot is "/proc" outside tests.
func RequestPerfMap(ctx context.Context, procRoot string, j JVM) (*PerfMapFile, error) {
	// The JVM's /tmp, reached through its root without following a symlink
	// out of it: a container's /tmp, not the node's.
	tmp, err := procfile.OpenInRoot(filepath.Join(procRoot, strconv.Itoa(j.PID)), "tmp")
	if err != nil {
		return nil, fmt.Errorf("JVM %d: its /tmp: %w", j.PID, err)
	}
	defer tmp.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(tmp.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, fmt.Errorf("JVM %d: its /tmp is not a directory", j.PID)
	}
	socket := fmt.Sprintf(".java_pid%d", j.NSPID)
	if !isListener(tmp, socket, j.UID) {
		if opt, disabled := attachDisabled(procRoot, j.PID); disabled {
			return nil, fmt.Errorf("JVM %d: attach disabled (%s): not signalled", j.PID, opt)
		}
		if err := startListener(ctx, tmp, socket, j); err != nil {
			return nil, fmt.Errorf("JVM %d: %w", j.PID, err)
		}
	}
	name := fmt.Sprintf("perf-%d.map", j.NSPID)
	existed := unix.Fstatat(int(tmp.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	if _, err := command(ctx, tmp, socket, j.PID, "jcmd", "Compiler.perfmap"); err != nil {
		return nil, fmt.Errorf("JVM %d: Compiler.perfmap: %w", j.PID, err)
	}
	if existed {
		return nil, nil
	}
	id, err := identify(int(tmp.Fd()), name)
	if err != nil {
		return nil, nil // the JVM wrote no map there: nothing to remove
	}
	dir, err := unix.FcntlInt(tmp.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, nil // the map is written; only its removal is given up
	}
	return &PerfMapFile{dir: dir, name: name, id: id}, nil
}

// disableAttach is the option that turns HotSpot's attach mechanism off. A
// JVM started with it answers SIGQUIT with a thread dump on its standard
// output, so it is not signalled: its command line, and the variables the
// java launcher and the JVM take options from, are looked at first. (An
// option given in an @argfile is not seen: such a JVM gets one signal, and
// the receiver does not ask it again.)
const disableAttach = "-XX:+DisableAttachMechanism"

// attachDisabled reports where pid's JVM was given disableAttach, if it was.
func attachDisabled(procRoot string, pid int) (string, bool) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	if raw, err := procfile.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
		for _, arg := range bytes.Split(raw, []byte{0}) {
			if string(arg) == disableAttach {
				return disableAttach + " on the command line", true
			}
		}
	}
	if raw, err := procfile.ReadFile(filepath.Join(dir, "environ")); err == nil {
		for _, kv := range bytes.Split(raw, []byte{0}) {
			name, val, _ := bytes.Cut(kv, []byte{'='})
			switch string(name) {
			case "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS":
				if bytes.Contains(val, []byte(disableAttach)) {
					return disableAttach + " in " + string(name), true
				}
			}
		}
	}
	return "", false
}

// isListener reports whether dir holds the JVM's attach socket: a socket
// owned by the JVM's user (a file someone else put there is not it).
func isListener(dir *os.File, name string, uid uint32) bool {
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFSOCK && st.Uid == uid
}

// startListener creates the trigger file, sends SIGQUIT and waits for the
// socket.
func startListener(ctx context.Context, tmp *os.File, socket string, j JVM) error {
	if !j.CatchesSIGQUIT {
		return errors.New("it does not handle SIGQUIT (started with -Xrs, or still starting): not signalled, its default action would end the process")
	}
	// HotSpot honours a trigger file its own effective user or root owns,
	// and answers only those two on the socket: the agent runs as root.
	trigger := fmt.Sprintf(".attach_pid%d", j.NSPID)
	fd, err := unix.Openat(int(tmp.Fd()), trigger, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	switch {
	case err == nil:
		unix.Close(fd)
		defer unix.Unlinkat(int(tmp.Fd()), trigger, 0) //nolint:errcheck // gone already: fine
	case errors.Is(err, unix.EEXIST):
		// Another client's attach (jcmd) is under way: its trigger file
		// serves this signal too, and is its to remove.
	default:
		return fmt.Errorf("trigger file /tmp/%s: %w", trigger, err)
	}
	if err := unix.Kill(j.PID, unix.SIGQUIT); err != nil {
		return fmt.Errorf("SIGQUIT: %w", err)
	}
	wait := time.NewTimer(listenerWait)
	defer wait.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !isListener(tmp, socket, j.UID) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wait.C:
			return fmt.Errorf("no attach listener (/tmp/%s) %v after SIGQUIT (-XX:+DisableAttachMechanism, or not a HotSpot JVM)", socket, listenerWait)
		case <-tick.C:
		}
	}
	return nil
}

// command sends one attach request and returns the command's output, or
// its error when the JVM's result code is not 0.
func command(ctx context.Context, tmp *os.File, socket string, pid int, cmd string, args ...string) (string, error) {
	// The socket is connected to through the directory's descriptor: its
	// path as the JVM sees it is in another mount namespace.
	path := fmt.Sprintf("/proc/self/fd/%d/%s", tmp.Fd(), socket)
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	uc := conn.(*net.UnixConn)
	// The peer must be the JVM itself, not a process that took the name.
	if err := checkPeer(uc, pid); err != nil {
		return "", err
	}
	deadline := time.Now().Add(30 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	var req bytes.Buffer
	req.WriteString("1\x00")
	req.WriteString(cmd + "\x00")
	for i := range 3 {
		if i < len(args) {
			req.WriteString(args[i])
		}
		req.WriteByte(0)
	}
	if _, err := conn.Write(req.Bytes()); err != nil {
		return "", fmt.Errorf("send: %w", err)
	}
	r := bufio.NewReader(io.LimitReader(conn, 1<<20))
	codeLine, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("answer: %w", err)
	}
	code, err := strconv.Atoi(strings.TrimSpace(codeLine))
	if err != nil {
		return "", fmt.Errorf("answer: result code %q", strings.TrimSpace(codeLine))
	}
	rest, err := io.ReadAll(r)
	if err != nil {
		return "", fmt.Errorf("answer: %w", err)
	}
	out := strings.TrimSpace(string(rest))
	if code != 0 {
		return out, fmt.Errorf("the JVM answered %d: %s", code, out)
	}
	// jcmd reports a command's own failure (a JDK without the command:
	// "java.lang.IllegalArgumentException: Unknown diagnostic command")
	// in its output, with result 0.
	if strings.Contains(out, "Exception") || strings.Contains(out, "Unknown diagnostic command") {
		return out, fmt.Errorf("the JVM answered: %s", out)
	}
	return out, nil
}

// checkPeer: the process at the other end of conn is pid.
func checkPeer(conn *net.UnixConn, pid int) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if credErr != nil {
		return fmt.Errorf("peer credentials: %w", credErr)
	}
	if int(cred.Pid) != pid {
		return fmt.Errorf("the attach socket belongs to process %d, not the JVM (%d): not used", cred.Pid, pid)
	}
	return nil
}

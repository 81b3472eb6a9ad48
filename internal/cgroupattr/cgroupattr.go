// Package cgroupattr tells which container, Kubernetes pod and container
// runtime a process belongs to from its /proc/PID/cgroup, on the node and
// without the Kubernetes API server. The runtimes name a container's cgroup
// after its ID and put it below its pod's cgroup, which carries the pod UID;
// the layouts differ by runtime (containerd, CRI-O, Docker), by the kubelet's
// cgroup driver (systemd or cgroupfs) and by cgroup version (v1 lists one
// path per hierarchy, v2 a single "0::" path):
//
//	systemd:  /kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid, "_" for "-">.slice/<prefix>-<id>.scope
//	cgroupfs: /kubepods/<qos>/pod<uid>/[<prefix>-]<id>
//	containerd with systemd cgroups on v1: .../kubepods-<qos>-pod<uid>.slice:cri-containerd:<id>
//	Docker alone: /system.slice/docker-<id>.scope or /docker/<id>
//
// where <prefix> is cri-containerd, crio, docker or libpod. The testdata
// folder holds real files of each layout.
package cgroupattr

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hotpath-dev/hotpath/internal/procfile"
)

// Runtime names, as container.runtime.name spells them.
const (
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "cri-o"
	RuntimeDocker     = "docker"
	RuntimePodman     = "podman"
)

// Container is where a process runs. Every field is "" when unknown: a
// host process has none; a container under the cgroupfs driver has an ID
// and a pod UID but no runtime (containerd and Docker name it alike).
type Container struct {
	ID      string // container.id: 64 lowercase hex digits
	PodUID  string // k8s.pod.uid
	Runtime string // container.runtime.name
}

// Read parses procRoot/PID/cgroup ("/proc" in production). A process whose
// file cannot be read (gone, or a kernel thread's empty file) has no
// container.
func Read(procRoot string, pid int) (Container, error) {
	b, err := procfile.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return Container{}, err
	}
	return Parse(string(b)), nil
}

// Parse reads the contents of a /proc/PID/cgroup file. Lines are
// "hierarchy-ID:controllers:path"; the first path naming a container wins
// (under cgroup v1 every hierarchy names the same one). A pod UID is taken
// from a path without a container too (a process in the pod's own cgroup).
func Parse(content string) Container {
	var pod Container
	for line := range strings.SplitSeq(content, "\n") {
		// The path is everything after the second colon: containerd's
		// systemd layout on v1 has colons in it.
		_, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		_, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		c := parsePath(path)
		if c.ID != "" {
			return c
		}
		if pod.PodUID == "" {
			pod.PodUID = c.PodUID
		}
	}
	return pod
}

// parsePath reads one cgroup path. The container is its deepest component
// that names one: a process may sit in a child cgroup of its container
// (".../<id>/kube-proxy", Docker's ".../docker-<id>.scope/init").
func parsePath(path string) Container {
	var c Container
	parts := strings.Split(path, "/")
	for i, part := range parts {
		if uid := podUID(part); uid != "" {
			c.PodUID = uid
		}
		if id, runtime, ok := containerID(part); ok {
			c.ID, c.Runtime = id, runtime
			if runtime == "" && i > 0 && parts[i-1] == "docker" {
				c.Runtime = RuntimeDocker // Docker's cgroupfs layout: /docker/<id>
			}
		}
	}
	return c
}

// containerID reads one path component: "<id>", "<prefix>-<id>[.scope]" or
// "<slice>:cri-containerd:<id>".
func containerID(part string) (id, runtime string, ok bool) {
	if i := strings.LastIndexByte(part, ':'); i >= 0 {
		// containerd's systemd cgroup naming on v1: "<slice>:<prefix>:<id>".
		head, id := part[:i], part[i+1:]
		j := strings.LastIndexByte(head, ':')
		if j < 0 || !isContainerID(id) {
			return "", "", false
		}
		runtime, known := prefixRuntime[head[j+1:]]
		return id, runtime, known
	}
	part = strings.TrimSuffix(part, ".scope")
	if isContainerID(part) {
		return part, "", true
	}
	dash := strings.LastIndexByte(part, '-')
	if dash < 0 || !isContainerID(part[dash+1:]) {
		return "", "", false
	}
	// "crio-conmon-<id>" and "libpod-conmon-<id>" are the runtime's
	// monitor process beside the container, not the container.
	runtime, known := prefixRuntime[part[:dash]]
	if !known {
		return "", "", false
	}
	return part[dash+1:], runtime, true
}

// prefixRuntime maps the prefix a runtime gives its containers' cgroups
// to the runtime.
var prefixRuntime = map[string]string{
	"cri-containerd": RuntimeContainerd,
	"crio":           RuntimeCRIO,
	"docker":         RuntimeDocker,
	"libpod":         RuntimePodman,
}

// isContainerID reports whether s is a full container ID: 64 lowercase hex
// digits, as every runtime here generates them.
func isContainerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isLowerHex(s[i]) {
			return false
		}
	}
	return true
}

func isLowerHex(b byte) bool { return b >= '0' && b <= '9' || b >= 'a' && b <= 'f' }

// podUID reads a pod's cgroup name: "pod<uid>" (cgroupfs) or
// "kubepods[-<qos>]-pod<uid with _>.slice" (systemd, which reserves "-").
// The UID is a UUID, or for a static pod the 32-hex hash of its manifest.
func podUID(part string) string {
	part, _, _ = strings.Cut(part, ":") // "<slice>:cri-containerd:<id>"
	var uid string
	switch {
	case strings.HasPrefix(part, "pod"):
		uid = part[len("pod"):]
	case strings.HasPrefix(part, "kubepods-") && strings.HasSuffix(part, ".slice"):
		name := strings.TrimSuffix(part, ".slice")
		i := strings.LastIndex(name, "-pod")
		if i < 0 {
			return ""
		}
		uid = strings.ReplaceAll(name[i+len("-pod"):], "_", "-")
	default:
		return ""
	}
	if !isPodUID(uid) {
		return ""
	}
	return uid
}

// isPodUID accepts a lowercase UUID (8-4-4-4-12 hex digits) or 32 hex
// digits (a static pod's manifest hash).
func isPodUID(s string) bool {
	switch len(s) {
	case 32:
		for i := 0; i < len(s); i++ {
			if !isLowerHex(s[i]) {
				return false
			}
		}
		return true
	case 36:
		for i := 0; i < len(s); i++ {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if s[i] != '-' {
					return false
				}
			} else if !isLowerHex(s[i]) {
				return false
			}
		}
		return true
	}
	return false
}

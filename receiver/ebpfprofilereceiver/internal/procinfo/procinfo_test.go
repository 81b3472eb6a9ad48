package procinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func TestContainerID(t *testing.T) {
	id := "3f1e2d4c5b6a79881726354453627180918273645546372819a0b1c2d3e4f5a6"
	for _, tc := range []struct{ name, cgroup, want string }{
		{"docker cgroup v1", "12:memory:/docker/" + id + "\n", id},
		{"systemd docker scope", "0::/system.slice/docker-" + id + ".scope\n", id},
		{"containerd cri", "0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-" + id + ".scope\n", id},
		{"host process", "0::/user.slice/user-0.slice/session-1.scope\n", ""},
		{"too short", "0::/docker/3f1e2d4c\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ContainerID(tc.cgroup); got != tc.want {
				t.Fatalf("ContainerID(%q) = %q, want %q", tc.cgroup, got, tc.want)
			}
		})
	}
}

func TestServiceFromEnviron(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"A=1\x00OTEL_SERVICE_NAME=checkout\x00", "checkout"},
		{"OTEL_RESOURCE_ATTRIBUTES=deployment.environment=prod,service.name=cart\x00", "cart"},
		{"OTEL_RESOURCE_ATTRIBUTES=service.name=cart\x00OTEL_SERVICE_NAME=checkout\x00", "checkout"},
		{"OTEL_SERVICE_NAME=\x00", ""},
		{"PATH=/bin\x00", ""},
	} {
		if got := serviceFromEnviron([]byte(tc.env)); got != tc.want {
			t.Errorf("serviceFromEnviron(%q) = %q, want %q", tc.env, got, tc.want)
		}
	}
}

// A real child process: its executable, and the service name it got from its
// environment.
func TestReadRealProcess(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sleep, "30")
	cmd.Env = append(os.Environ(), "OTEL_SERVICE_NAME=sleepy")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	// Start returns once exec has closed the child's close-on-exec pipe, which
	// the kernel does before it lays out the new environment: poll briefly.
	var info Info
	for i := 0; i < 100; i++ {
		if info, err = Read("/proc", cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		if info.EnvService != "" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	want, _ := filepath.EvalSymlinks(sleep)
	if info.ExePath != want || info.ExeName != filepath.Base(want) {
		t.Errorf("exe = %q (%q), want %q", info.ExePath, info.ExeName, want)
	}
	if info.EnvService != "sleepy" {
		t.Errorf("EnvService = %q, want sleepy", info.EnvService)
	}

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if _, err := Read("/proc", cmd.Process.Pid); err == nil {
		t.Error("Read of an exited process succeeded; want an error")
	}
}

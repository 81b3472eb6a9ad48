package cgroupattr

import (
	"os"
	"path/filepath"
	"testing"
)

// Each case is a real /proc/PID/cgroup file of one runtime layout (see
// testdata/README.md for where each comes from).
func TestParseRealLayouts(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Container
	}{
		{"containerd-systemd-v2.cgroup", Container{"bacb920470900725e0aa7d914fee5eb0854315448b024b6b8420ad8429c607ba", "4c9f1974-5c46-44c2-b42f-3bbf0e98eef9", RuntimeContainerd}},
		{"containerd-systemd-v1-bottlerocket.cgroup", Container{"f45298cd514d1930c4fe3afc4412e59547f7e3148fddd22ca33cefce046eb830", "dd1bf9d1-241d-47f5-8e25-12de83135812", RuntimeContainerd}},
		{"containerd-systemd-v1-colon.cgroup", Container{"d3d8ccf5cca91931c6285c1d7472c413dd5a7700fddc0aa9f89a9ac7008b003e", "2105e389-7471-476e-a50f-6074cef29bbd", RuntimeContainerd}},
		{"cgroupfs-v1-kubepods.cgroup", Container{"5dd96d5394ca930a854a390ea46f7515a8bc930123eb3251ba20f2708a38fc61", "a36d0c1d-0b26-4451-8d80-9c195e004afa", ""}},
		{"cgroupfs-v2-kubepods.cgroup", Container{"f52a212505a606972cf8614c3cb856539e71b77ecae33436c5ac442232fbacf8", "05e102bf-8744-4942-a241-9b6f07983a53", ""}},
		{"cgroupfs-v1-child-cgroup.cgroup", Container{"c04e0a88a1de067f25bece337d4dbb897396e0b623c2a65330850fc9823f1903", "f8a694f2-7c08-11e9-98da-000c29077430", ""}},
		{"crio-systemd-v1-openshift.cgroup", Container{"d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607", "8ca306fa-3c03-47fa-97dd-19979c345572", RuntimeCRIO}},
		{"crio-systemd-v1-static-pod.cgroup", Container{"7a1fd6fe8cdfbd44dc78c4cc85dad7031eaab4365801684cad0aabdeaf863f9e", "487a0dc6dccaeefbcfedba7a7ce1ca18", RuntimeCRIO}},
		{"crio-cgroupfs-v2.cgroup", Container{"a4d6b686848a610472a2eed3ae20d4d64b6b4819feb9fdfc7fd7854deaf59ef3", "897277d4-5e6f-4999-a976-b8340e8d075e", RuntimeCRIO}},
		{"docker-systemd-v1-kubepods.cgroup", Container{"b5b6f2da8008be266864f896f93789762b2ce50792114a5c5f2cc3315af0bc70", "045b1e35-7f13-11e7-ac42-0050568ffca0", RuntimeDocker}},
		{"docker-systemd-v1.cgroup", Container{"9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d", "", RuntimeDocker}},
		{"docker-cgroupfs-v1.cgroup", Container{"31cb02944da7a12196a193cf0e0f6c226d7c453a1db62e65ba98287593a2ee30", "", RuntimeDocker}},
		{"docker-systemd-v2-nested.cgroup", Container{"b1eba9dfaeba29d8b80532a574a03ea3cac29384327f339c26da13649e2120df", "", RuntimeDocker}},
		{"host-v1.cgroup", Container{}},
		{"host-v2-user-session.cgroup", Container{}},
		{"host-v2-containerd-daemon.cgroup", Container{}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if got := Parse(string(b)); got != tc.want {
				t.Errorf("Parse = %+v\nwant    %+v", got, tc.want)
			}
		})
	}
}

// Paths that look close to a container but are not one.
func TestParseRejectsLookalikes(t *testing.T) {
	const id = "b4d6d161c62525d726fa394b27df30e14f8ea5646313ada576b390de70cfc8cc"
	for name, content := range map[string]string{
		"conmon beside a CRI-O container": "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod4c9f1974_5c46_44c2_b42f_3bbf0e98eef9.slice/crio-conmon-" + id + ".scope",
		"63 hex digits":                   "0::/system.slice/docker-" + id[1:] + ".scope",
		"uppercase hex":                   "0::/docker/B4D6D161C62525D726FA394B27DF30E14F8EA5646313ADA576B390DE70CFC8CC",
		"unknown prefix":                  "0::/system.slice/foo-" + id + ".scope",
		"32 hex digits, not a container":  "4:memory:/machine/3f1ab5b352422cb34d9307aaef702a3c",
		"no path":                         "0::",
		"not a cgroup file":               "garbage",
	} {
		t.Run(name, func(t *testing.T) {
			got := Parse(content)
			if got.ID != "" || got.Runtime != "" {
				t.Errorf("Parse(%q) = %+v, want no container", content, got)
			}
		})
	}
	// The conmon case still names the pod.
	got := Parse("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod4c9f1974_5c46_44c2_b42f_3bbf0e98eef9.slice/crio-conmon-" + id + ".scope")
	if got.PodUID != "4c9f1974-5c46-44c2-b42f-3bbf0e98eef9" {
		t.Errorf("pod of a conmon process = %q", got.PodUID)
	}
}

func TestReadOwnProcess(t *testing.T) {
	// This test's own process: whatever it runs in, Read agrees with
	// Parse of the same file, and a missing process is an error.
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skip("no /proc here")
	}
	got, err := Read("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if want := Parse(string(b)); got != want {
		t.Errorf("Read = %+v, Parse = %+v", got, want)
	}
	dir := t.TempDir()
	if _, err := Read(dir, 1); err == nil {
		t.Errorf("Read of a missing process under %s: no error", dir)
	}
}

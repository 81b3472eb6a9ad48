// Package buildid identifies the exact build of a binary: the GNU build ID
// note, the Go build ID note, or else a SHA-256 of the file. Symbol caches,
// storage and the CLI key everything per-binary by these IDs, so one package
// owns how they are read and spelled.
package buildid

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// Info is what is known about one binary's build.
type Info struct {
	// GNU is the NT_GNU_BUILD_ID note as lowercase hex ("" when absent).
	GNU string
	// Go is the Go toolchain's build ID ("" when absent), as `go tool
	// buildid` prints it.
	Go string
	// SHA256 is the hex SHA-256 of the whole file. It is computed only when
	// the file has neither note (hashing a large binary is the expensive
	// path, and a note already identifies the build).
	SHA256 string
	// HTLHash is the OpenTelemetry eBPF profiler's file ID
	// (process.executable.build_id.htlhash: a hash of the file's head, tail
	// and length). hotpath never computes it; it is read from received
	// profiles, and identifies a build only when no note is known.
	HTLHash string
	// HasDebugInfo is set when the file carries DWARF (.debug_info or
	// .zdebug_info) or points at a separate debug file (.gnu_debuglink).
	HasDebugInfo bool
	// IsELF is false for files debug/elf cannot open (scripts, truncated
	// files): they are identified by SHA256 alone.
	IsELF bool
}

// Attributes are the build-ID attribute keys and values to set for i on a
// resource or mapping: each kind present, and the canonical ID; empty ones
// are left out.
func (i Info) Attributes() [][2]string {
	var out [][2]string
	for _, kv := range [][2]string{
		{profileschema.AttrBuildIDGNU, i.GNU},
		{profileschema.AttrBuildIDGo, i.Go},
		{profileschema.AttrBuildIDSHA256, i.SHA256},
		{profileschema.AttrBuildIDHTLHash, i.HTLHash},
		{profileschema.AttrBuildID, i.Canonical()},
	} {
		if kv[1] != "" {
			out = append(out, kv)
		}
	}
	return out
}

// SHA256Prefix marks a canonical ID that is a file hash rather than a note.
const SHA256Prefix = "sha256:"

// HTLHashPrefix marks a canonical ID that is the eBPF profiler's file hash.
const HTLHashPrefix = "htlhash:"

// Canonical is the one ID storage and symbol caches key by:
//   - the GNU build ID as lowercase hex when present (the form debuginfod
//     and `file` use), else
//   - the Go build ID verbatim (it contains '/' between its parts), else
//   - "sha256:" followed by the file's SHA-256 in lowercase hex, else
//   - "htlhash:" followed by the eBPF profiler's file hash.
//
// The prefixes keep a hash from being mistaken for a GNU note.
func (i Info) Canonical() string {
	switch {
	case i.GNU != "":
		return i.GNU
	case i.Go != "":
		return i.Go
	case i.SHA256 != "":
		return SHA256Prefix + i.SHA256
	case i.HTLHash != "":
		return HTLHashPrefix + i.HTLHash
	}
	return ""
}

// FromAttributes reads the build-ID kinds a producer put in attributes (a
// resource's, or a mapping's where the profiles semantic conventions put
// them); get returns an attribute's string value. The canonical
// hotpath.build_id is derived, not read: Canonical gives it.
func FromAttributes(get func(key string) (string, bool)) Info {
	var i Info
	for _, f := range []struct {
		key string
		dst *string
	}{
		{profileschema.AttrBuildIDGNU, &i.GNU},
		{profileschema.AttrBuildIDGo, &i.Go},
		{profileschema.AttrBuildIDSHA256, &i.SHA256},
		{profileschema.AttrBuildIDHTLHash, &i.HTLHash},
	} {
		if v, ok := get(f.key); ok {
			*f.dst = v
		}
	}
	return i
}

// Read identifies the binary at path.
func Read(path string) (Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return Info{}, fmt.Errorf("open binary: %w", err)
	}
	defer f.Close()
	return ReadFile(f)
}

// ReadFile identifies an open binary. It reads from offset 0 with ReadAt and
// Seek, so the caller's file position does not matter.
func ReadFile(f *os.File) (Info, error) {
	ef, err := elf.NewFile(f)
	if err != nil {
		// Not ELF (or not readable as such): still identify the file.
		sum, herr := hashFile(f)
		if herr != nil {
			return Info{}, herr
		}
		return Info{SHA256: sum}, nil
	}
	info := Info{IsELF: true}
	if err := readNotes(ef, &info); err != nil {
		return Info{}, fmt.Errorf("read ELF notes of %s: %w", f.Name(), err)
	}
	for _, name := range []string{".debug_info", ".zdebug_info", ".gnu_debuglink"} {
		if ef.Section(name) != nil {
			info.HasDebugInfo = true
			break
		}
	}
	if info.GNU == "" && info.Go == "" {
		if info.SHA256, err = hashFile(f); err != nil {
			return Info{}, err
		}
	}
	return info, nil
}

func hashFile(f *os.File) (string, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", fmt.Errorf("hash %s: %w", f.Name(), err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", f.Name(), err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ELF note types (elf.h) and the Go linker's note type.
const (
	ntGNUBuildID = 3
	ntGoBuildID  = 4
)

// readNotes looks in every note section; a binary whose section headers were
// stripped still has its notes in PT_NOTE segments, which are read instead.
func readNotes(ef *elf.File, info *Info) error {
	var blobs [][]byte
	for _, s := range ef.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		data, err := s.Data()
		if err != nil {
			return fmt.Errorf("section %s: %w", s.Name, err)
		}
		blobs = append(blobs, data)
	}
	if len(blobs) == 0 {
		for _, p := range ef.Progs {
			if p.Type != elf.PT_NOTE {
				continue
			}
			data, err := io.ReadAll(p.Open())
			if err != nil {
				return fmt.Errorf("note segment at 0x%x: %w", p.Off, err)
			}
			blobs = append(blobs, data)
		}
	}
	for _, data := range blobs {
		parseNotes(data, ef.ByteOrder, info)
	}
	return nil
}

// parseNotes walks one note section: entries of namesz, descsz, type, then
// name and desc each padded to 4 bytes. Malformed trailing data is ignored:
// a damaged note must not hide the others.
func parseNotes(data []byte, bo binary.ByteOrder, info *Info) {
	pad4 := func(n uint32) uint64 { return (uint64(n) + 3) &^ 3 }
	for len(data) >= 12 {
		namesz, descsz, typ := bo.Uint32(data[0:4]), bo.Uint32(data[4:8]), bo.Uint32(data[8:12])
		rest := data[12:]
		nameEnd := pad4(namesz)
		descEnd := nameEnd + pad4(descsz)
		if uint64(len(rest)) < nameEnd+uint64(descsz) {
			return
		}
		name := string(bytes.TrimRight(rest[:namesz], "\x00"))
		desc := rest[nameEnd : nameEnd+uint64(descsz)]
		switch {
		case name == "GNU" && typ == ntGNUBuildID && info.GNU == "":
			info.GNU = hex.EncodeToString(desc)
		case name == "Go" && typ == ntGoBuildID && info.Go == "":
			info.Go = strings.TrimRight(string(desc), "\x00")
		}
		if uint64(len(rest)) < descEnd {
			return
		}
		data = rest[descEnd:]
	}
}

// ErrNotRegular is returned for paths that are not regular files (a
// directory, a device): they have no build.
var ErrNotRegular = errors.New("not a regular file")

// Identity returns path's file identity after checking it is a regular file.
func Identity(path string) (fileid.ID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileid.ID{}, err
	}
	if !fi.Mode().IsRegular() {
		return fileid.ID{}, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	return fileid.FromInfo(fi)
}

// FileKey is the build of an open file, for sharing what is derived from a
// binary between the files of one build: "gnu:<id>:<size>" or
// "go:<id>:<size>", "" when it has neither note (or is not ELF). The size
// tells apart the stripped and unstripped files of one build. It reads the
// ELF headers and notes, a few kilobytes, and hashes nothing.
//
// A file is trusted to be the build its notes say, as debuginfod servers,
// symbol stores and the gateway's queries (which group by build ID) trust
// it: a binary forged to carry another's build ID and size would share
// that binary's tables (docs/security.md, "Binaries that share tables").
func FileKey(f *os.File) string {
	ef, err := elf.NewFile(f)
	if err != nil {
		return ""
	}
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	info := FromNotes(ef)
	switch {
	case info.GNU != "":
		return "gnu:" + info.GNU + ":" + strconv.FormatInt(fi.Size(), 10)
	case info.Go != "":
		return "go:" + info.Go + ":" + strconv.FormatInt(fi.Size(), 10)
	}
	return ""
}

// FromNotes reads the build notes (GNU and Go build IDs) of an ELF file
// already open; nothing is hashed.
func FromNotes(ef *elf.File) Info {
	info := Info{IsELF: true}
	_ = readNotes(ef, &info) // a damaged note section leaves the IDs empty
	return info
}

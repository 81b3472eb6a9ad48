//go:build linux

package tracectx

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"github.com/hotpath-dev/hotpath/internal/buildid"
	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/procfile"
	"github.com/hotpath-dev/hotpath/internal/procmaps"
)

// maxPlainBinaries bounds the cache of binaries known to have no markers;
// past it the cache starts over (a re-read costs one ELF symbol scan).
const maxPlainBinaries = 16384

// Probes attaches the marker uprobes to every binary that contains SDK
// markers and is mapped by a live process, and detaches them when the last
// such process exits.
//
// Uprobes are attached per binary without a PID filter: the kernel then
// fires them in every process that maps the file, including ones started
// after the attach and before any event or rescan reports them, so a new
// replica's first request is tagged too. One binary costs four uprobes
// however many processes run it. The price: a process excluded from
// profiling still pays the (small) uprobe cost of its markers.
//
// The kernel attaches a uprobe to the file underneath an overlay mount, so
// one attach serves every container of an image: each container's mount
// gives the image's binary a file identity of its own (its own device
// number) over the same file, and attaching again for each would run the
// markers' programs once per container at every call.
type Probes struct {
	procRoot string
	maps     *Maps
	objs     traceCtxObjects

	mu     sync.Mutex
	bins   map[fileid.ID]*binary
	byFile map[underlyingFile]*binary
	plain  map[fileid.ID]struct{}
	procs  map[int][]fileid.ID // pid -> marker binaries it maps
	closed bool
}

// underlyingFile tells the files of one build with one inode number apart
// from the others: overlay mounts over one lower layer show its file with
// that file's inode number (and each mount's own device number), and the
// build (buildid.FileKey) rules out a file of another file system that has
// the same number. A container that rewrites the file gets a new one in
// its upper layer, of another build or size, or it shares the uprobes of
// the file it replaced and its own calls go unseen.
type underlyingFile struct {
	build string
	inode uint64
}

type binary struct {
	path    string
	markers []Marker
	links   []link.Link
	pids    map[int]struct{}
	ids     []fileid.ID    // its keys in bins: the identities it was met under
	file    underlyingFile // its key in byFile; zero build: not shared
}

// MarkerStats counts marker calls seen by the uprobes since NewProbes.
type MarkerStats struct {
	Set, Clear uint64
	// ReadFailed: the context pointer passed to set could not be read.
	ReadFailed uint64
	// NoGoroutine: a Go marker fired but no goroutine was found in TLS.
	NoGoroutine uint64
}

// NewProbes loads the uprobe programs, writing to maps. kernelTypes, when
// not nil, is the kernel's BTF shared with the loads that follow (the
// sampler's); nil decodes it for this load alone.
func NewProbes(maps *Maps, kernelTypes *btf.Cache) (*Probes, error) {
	if maps == nil || maps.Threads == nil || maps.Goroutines == nil {
		return nil, errors.New("trace context probes: maps are not open")
	}
	spec, err := loadTraceCtx()
	if err != nil {
		return nil, fmt.Errorf("load trace context BPF spec: %w", err)
	}
	p := &Probes{
		procRoot: "/proc",
		maps:     maps,
		bins:     map[fileid.ID]*binary{},
		byFile:   map[underlyingFile]*binary{},
		plain:    map[fileid.ID]struct{}{},
		procs:    map[int][]fileid.ID{},
	}
	err = spec.LoadAndAssign(&p.objs, &ebpf.CollectionOptions{Cache: kernelTypes, MapReplacements: map[string]*ebpf.Map{
		traceCtxMapTracesCtxV1: maps.Threads,
		traceCtxMapGoTraces:    maps.Goroutines,
	}})
	if err != nil {
		return nil, fmt.Errorf("load marker uprobe programs: %w", err)
	}
	return p, nil
}

// File is one file a process maps executable: the path to open it by (for a
// process in another mount namespace, through /proc/PID/root) and its
// identity, which keys what is known about it.
type File struct {
	Path string
	ID   fileid.ID
}

// Observe looks at the binaries pid maps and attaches to those with
// markers. Call it when a process is first seen and after exec (its image
// changed). A process that is gone already is not an error.
func (p *Probes) Observe(pid int) error {
	paths, err := p.mappedFiles(pid)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	files := make([]File, 0, len(paths))
	for _, path := range paths {
		full := filepath.Join(p.procRoot, strconv.Itoa(pid), "root", path)
		id, err := fileid.Of(full)
		if err != nil {
			continue // gone or replaced since mapped: nothing to attach to
		}
		files = append(files, File{Path: full, ID: id})
	}
	return p.ObserveFiles(pid, files)
}

// ObserveFiles is Observe with the process's files already read (the
// receiver reads every sampled process's mappings anyway): a binary already
// known, with or without markers, costs a map lookup.
func (p *Probes) ObserveFiles(pid int, files []File) error {
	var ids []fileid.ID
	var errs []error
	for _, f := range files {
		ok, err := p.ensureAttached(f.ID, f.Path)
		if err != nil {
			errs = append(errs, fmt.Errorf("pid %d: %w", pid, err))
			continue
		}
		if ok {
			ids = append(ids, f.ID)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.Join(errs...)
	}
	old := p.procs[pid]
	for _, id := range ids {
		if b := p.bins[id]; b != nil {
			b.pids[pid] = struct{}{}
		}
	}
	for _, id := range old {
		if !containsID(ids, id) {
			p.release(id, pid)
		}
	}
	if len(ids) == 0 {
		delete(p.procs, pid)
	} else {
		p.procs[pid] = ids
	}
	p.dropUnused(ids)
	return errors.Join(errs...)
}

// ensureAttached reports whether the binary has markers, attaching their
// uprobes the first time it is met.
func (p *Probes) ensureAttached(id fileid.ID, path string) (bool, error) {
	p.mu.Lock()
	_, known := p.bins[id]
	_, plain := p.plain[id]
	p.mu.Unlock()
	if known {
		return true, nil
	}
	if plain {
		return false, nil
	}
	markers, err := FindMarkers(path)
	if err != nil {
		// Not an ELF file we can read (a font, a locale archive): no
		// markers, and no reason to try again.
		p.mu.Lock()
		p.addPlain(id)
		p.mu.Unlock()
		return false, nil
	}
	if len(markers) == 0 {
		p.mu.Lock()
		p.addPlain(id)
		p.mu.Unlock()
		return false, nil
	}
	file := underlyingFile{build: fileBuild(path), inode: id.Inode}
	if p.shareAttached(id, file) {
		return true, nil
	}
	links, err := p.attach(path, markers)
	if err != nil {
		return false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		closeLinks(links)
		return false, nil
	}
	if p.bins[id] != nil || p.shareAttachedLocked(id, file) {
		// Attached concurrently: keep one set.
		closeLinks(links)
		return true, nil
	}
	b := &binary{path: path, markers: markers, links: links, pids: map[int]struct{}{}, ids: []fileid.ID{id}}
	p.bins[id] = b
	if file.build != "" {
		b.file = file
		p.byFile[file] = b
	}
	return true, nil
}

// shareAttached records the file id as another view of an attached binary
// of the same underlying file, if there is one.
func (p *Probes) shareAttached(id fileid.ID, file underlyingFile) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && p.shareAttachedLocked(id, file)
}

func (p *Probes) shareAttachedLocked(id fileid.ID, file underlyingFile) bool {
	if file.build == "" {
		return false
	}
	b := p.byFile[file]
	if b == nil {
		return false
	}
	if p.bins[id] == nil {
		p.bins[id] = b
		b.ids = append(b.ids, id)
	}
	return true
}

// fileBuild is buildid.FileKey of the file at path, "" when it cannot be
// read.
func fileBuild(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	return buildid.FileKey(f)
}

func (p *Probes) attach(path string, markers []Marker) ([]link.Link, error) {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, fmt.Errorf("open %s for uprobes: %w", path, err)
	}
	var links []link.Link
	for _, m := range markers {
		set, clear := p.objs.GoSet, p.objs.GoClear
		setSym, clearSym := GoSetSymbol, GoClearSymbol
		if m.Flavor == FlavorC {
			set, clear = p.objs.NativeSet, p.objs.NativeClear
			setSym, clearSym = CSetSymbol, CClearSymbol
		}
		for _, u := range []struct {
			sym  string
			prog *ebpf.Program
			off  uint64
		}{{setSym, set, m.SetOffset}, {clearSym, clear, m.ClearOffset}} {
			l, err := ex.Uprobe(u.sym, u.prog, &link.UprobeOptions{Address: u.off})
			if err != nil {
				closeLinks(links)
				return nil, fmt.Errorf("attach uprobe %s in %s at %#x: %w", u.sym, path, u.off, err)
			}
			links = append(links, l)
		}
	}
	return links, nil
}

// Exit forgets pid: binaries no live process maps lose their uprobes, and
// the goroutine contexts the process left behind are deleted.
func (p *Probes) Exit(pid int) error {
	p.mu.Lock()
	ids, ok := p.procs[pid]
	delete(p.procs, pid)
	goProc := false
	for _, id := range ids {
		if b := p.bins[id]; b != nil && b.hasFlavor(FlavorGo) {
			goProc = true
		}
		p.release(id, pid)
	}
	p.mu.Unlock()
	if !ok || !goProc {
		return nil
	}
	return p.purgeGoroutines(uint32(pid))
}

// purgeGoroutines deletes every go_traces entry of tgid: a goroutine that
// was preempted for good (process exit) never calls clear.
func (p *Probes) purgeGoroutines(tgid uint32) error {
	var k traceCtxGoTraceKey
	var v traceCtxTraceCtx
	var stale []traceCtxGoTraceKey
	it := p.maps.Goroutines.Iterate()
	for it.Next(&k, &v) {
		if k.Tgid == tgid {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("list goroutine contexts of pid %d: %w", tgid, err)
	}
	for i := range stale {
		if err := p.maps.Goroutines.Delete(&stale[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete goroutine context of pid %d: %w", tgid, err)
		}
	}
	return nil
}

// Rescan observes every process under /proc except those skip names (the
// receiver tracks the sampled ones through their events and mappings), and
// forgets the ones that are gone. It catches what events cannot: processes
// that started before the agent, processes never sampled (idle servers) and
// missed exit events. skip may be nil.
func (p *Probes) Rescan(skip func(pid int) bool) error {
	entries, err := os.ReadDir(p.procRoot)
	if err != nil {
		return fmt.Errorf("rescan: list %s: %w", p.procRoot, err)
	}
	live := map[int]struct{}{}
	var errs []error
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		live[pid] = struct{}{}
		if skip != nil && skip(pid) {
			continue
		}
		if err := p.Observe(pid); err != nil {
			errs = append(errs, err)
		}
	}
	p.mu.Lock()
	var gone []int
	for pid := range p.procs {
		if _, ok := live[pid]; !ok {
			gone = append(gone, pid)
		}
	}
	p.mu.Unlock()
	for _, pid := range gone {
		if err := p.Exit(pid); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Attached lists the paths of binaries whose markers are instrumented now,
// each once (by the path it was attached through).
func (p *Probes) Attached() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for id, b := range p.bins {
		if b.ids[0] == id {
			out = append(out, b.path)
		}
	}
	return out
}

// Stats sums the uprobes' per-CPU counters.
func (p *Probes) Stats() (MarkerStats, error) {
	var st MarkerStats
	for i, dst := range []*uint64{&st.Set, &st.Clear, &st.ReadFailed, &st.NoGoroutine} {
		var perCPU []uint64
		if err := p.objs.MarkerStats.Lookup(uint32(i), &perCPU); err != nil {
			return st, fmt.Errorf("read marker stats: %w", err)
		}
		for _, v := range perCPU {
			*dst += v
		}
	}
	return st, nil
}

// Close detaches every uprobe and unloads the programs. The maps stay open
// (their owner closes them).
func (p *Probes) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	for _, b := range p.bins {
		errs = append(errs, p.detach(b))
	}
	errs = append(errs, p.objs.Close())
	return errors.Join(errs...)
}

// release drops pid from a binary; the last process out detaches it.
// Called with p.mu held.
func (p *Probes) release(id fileid.ID, pid int) {
	b := p.bins[id]
	if b == nil {
		return
	}
	delete(b.pids, pid)
	if len(b.pids) == 0 {
		p.detach(b)
	}
}

// detach closes b's uprobes and forgets it under every identity it was
// met under. Called with p.mu held.
func (p *Probes) detach(b *binary) error {
	for _, id := range b.ids {
		delete(p.bins, id)
	}
	if b.file.build != "" && p.byFile[b.file] == b {
		delete(p.byFile, b.file)
	}
	return closeLinks(b.links)
}

// dropUnused detaches binaries attached during an Observe whose process
// turned out not to map them any more (exec'd meanwhile). keep are the ids
// just recorded. Called with p.mu held.
func (p *Probes) dropUnused(keep []fileid.ID) {
	for _, b := range p.bins {
		if len(b.pids) == 0 && !slices.ContainsFunc(b.ids, func(id fileid.ID) bool { return containsID(keep, id) }) {
			p.detach(b)
		}
	}
}

func (p *Probes) addPlain(id fileid.ID) {
	if len(p.plain) >= maxPlainBinaries {
		clear(p.plain)
	}
	p.plain[id] = struct{}{}
}

// mappedFiles lists the distinct files pid maps executable.
func (p *Probes) mappedFiles(pid int) ([]string, error) {
	raw, err := procfile.ReadFile(filepath.Join(p.procRoot, strconv.Itoa(pid), "maps"))
	if err != nil {
		// ESRCH while reading: the process exited.
		return nil, fmt.Errorf("read maps of pid %d: %w", pid, err)
	}
	ms, err := procmaps.ParseExecutable(raw)
	if err != nil {
		return nil, fmt.Errorf("maps of pid %d: %w", pid, err)
	}
	var paths []string
	seen := map[string]struct{}{}
	for _, m := range ms {
		if m.Deleted || !strings.HasPrefix(m.Path, "/") {
			continue // deleted: the path now names another file
		}
		if _, ok := seen[m.Path]; !ok {
			seen[m.Path] = struct{}{}
			paths = append(paths, m.Path)
		}
	}
	return paths, nil
}

func (b *binary) hasFlavor(f Flavor) bool {
	for _, m := range b.markers {
		if m.Flavor == f {
			return true
		}
	}
	return false
}

func closeLinks(links []link.Link) error {
	var errs []error
	for _, l := range links {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach uprobe: %w", err))
		}
	}
	return errors.Join(errs...)
}

func containsID(ids []fileid.ID, id fileid.ID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

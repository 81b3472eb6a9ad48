package buildidprocessor

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/buildid"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// annotateMappings sets the build-ID keys on every mapping a local process's
// samples reach. The dictionary is shared by all resources of the batch, so
// each mapping is resolved in the first local process found using it.
func (p *buildIDProcessor) annotateMappings(ctx context.Context, pd pprofile.Profiles, procs []*process) {
	dict := pd.Dictionary()
	maps := dict.MappingTable()
	if maps.Len() <= 1 {
		return
	}
	owner := mappingOwners(pd, procs)
	w := newAttrWriter(dict)
	type fileKey struct {
		proc *process
		file string
		lo   uint64
		hi   uint64
	}
	resolved := map[fileKey]*buildid.Info{}
	for mi := 1; mi < maps.Len(); mi++ {
		if owner[mi] == 0 {
			continue
		}
		proc := procs[owner[mi]-1]
		m := maps.At(mi)
		if w.has(m.AttributeIndices(), profileschema.AttrBuildID) {
			continue
		}
		file := profileschema.Str(dict, m.FilenameStrindex())
		k := fileKey{proc, file, m.MemoryStart(), m.MemoryLimit()}
		info, done := resolved[k]
		if !done {
			if i, ok := p.resolveMapping(ctx, proc, file, m.MemoryStart(), m.MemoryLimit()); ok {
				info = &i
			}
			resolved[k] = info
		}
		if info == nil {
			continue
		}
		for _, kv := range info.Attributes() {
			m.AttributeIndices().Append(w.index(kv[0], kv[1]))
		}
	}
}

// mappingOwners returns, per mapping index, 1 + the index of the first local
// resource whose samples reach it (0: none). Out-of-range indices are
// skipped: the aggregator counts them.
func mappingOwners(pd pprofile.Profiles, procs []*process) []int32 {
	dict := pd.Dictionary()
	stacks, locs := dict.StackTable(), dict.LocationTable()
	owner := make([]int32, dict.MappingTable().Len())
	mark := make([]int32, stacks.Len())
	rps := pd.ResourceProfiles()
	for r := 0; r < rps.Len(); r++ {
		if procs[r] == nil {
			continue
		}
		sps := rps.At(r).ScopeProfiles()
		for s := 0; s < sps.Len(); s++ {
			profs := sps.At(s).Profiles()
			for pi := 0; pi < profs.Len(); pi++ {
				samples := profs.At(pi).Samples()
				for i := 0; i < samples.Len(); i++ {
					si := samples.At(i).StackIndex()
					if si <= 0 || int(si) >= stacks.Len() || mark[si] == int32(r+1) {
						continue
					}
					mark[si] = int32(r + 1)
					li := stacks.At(int(si)).LocationIndices()
					for j := 0; j < li.Len(); j++ {
						l := li.At(j)
						if l <= 0 || int(l) >= locs.Len() {
							continue
						}
						mi := locs.At(int(l)).MappingIndex()
						if mi > 0 && int(mi) < len(owner) && owner[mi] == 0 {
							owner[mi] = int32(r + 1)
						}
					}
				}
			}
		}
	}
	return owner
}

// resolveMapping reads the build of a mapped file of proc. The mapping's own
// /proc/PID/map_files entry is the exact file mapped (even if deleted or
// replaced since); the path under /proc/PID/root is the fallback when the
// mapping's range is not one of the process's VMAs.
func (p *buildIDProcessor) resolveMapping(ctx context.Context, proc *process, file string, lo, hi uint64) (buildid.Info, bool) {
	file = trimDeleted(file)
	if !filepath.IsAbs(file) {
		return buildid.Info{}, false // [vdso], anonymous memory, memfd:..., kernel
	}
	if filepath.Clean(file) != file {
		// The kernel writes clean paths; "/../x" joined under
		// /proc/PID/root would escape the process's root.
		p.tel.ProcessorBuildidUnresolvedBinaries.Add(ctx, 1)
		return buildid.Info{}, false
	}
	if file == proc.exePath && proc.exe != nil {
		return *proc.exe, true
	}
	var candidates []string
	if proc.procDir != "" {
		if lo < hi {
			candidates = append(candidates, filepath.Join(proc.procDir, "map_files", fmt.Sprintf("%x-%x", lo, hi)))
		}
		candidates = append(candidates, filepath.Join(proc.procDir, "root", strings.TrimPrefix(file, "/")))
	} else {
		candidates = append(candidates, file)
	}
	for _, c := range candidates {
		if info, ok := p.lookup(ctx, c); ok {
			return info, true
		}
	}
	p.tel.ProcessorBuildidUnresolvedBinaries.Add(ctx, 1)
	return buildid.Info{}, false
}

// attrWriter adds string attributes to a dictionary's attribute table,
// reusing equal entries. Its maps are built once per batch: the pprofile
// Set* helpers scan the tables on every call.
type attrWriter struct {
	dict  pprofile.ProfilesDictionary
	strs  map[string]int32
	attrs map[[2]int32]int32 // key, value string index → attribute index
}

func newAttrWriter(dict pprofile.ProfilesDictionary) *attrWriter {
	w := &attrWriter{dict: dict, strs: map[string]int32{}, attrs: map[[2]int32]int32{}}
	st := dict.StringTable()
	for i := st.Len() - 1; i >= 0; i-- { // first occurrence wins
		w.strs[st.At(i)] = int32(i)
	}
	at := dict.AttributeTable()
	for i := at.Len() - 1; i >= 1; i-- {
		kv := at.At(i)
		if kv.Value().Type() != pcommon.ValueTypeStr || kv.UnitStrindex() != 0 {
			continue
		}
		if vi, ok := w.strs[kv.Value().Str()]; ok {
			w.attrs[[2]int32{kv.KeyStrindex(), vi}] = int32(i)
		}
	}
	return w
}

func (w *attrWriter) str(s string) int32 {
	if i, ok := w.strs[s]; ok {
		return i
	}
	st := w.dict.StringTable()
	if st.Len() == 0 {
		st.Append("") // index 0 is the empty string
		w.strs[""] = 0
		if s == "" {
			return 0
		}
	}
	i := int32(st.Len())
	st.Append(s)
	w.strs[s] = i
	return i
}

func (w *attrWriter) index(key, value string) int32 {
	k := [2]int32{w.str(key), w.str(value)}
	if i, ok := w.attrs[k]; ok {
		return i
	}
	at := w.dict.AttributeTable()
	if at.Len() == 0 {
		at.AppendEmpty() // index 0 is the zero entry
	}
	i := int32(at.Len())
	kv := at.AppendEmpty()
	kv.SetKeyStrindex(k[0])
	kv.Value().SetStr(value)
	w.attrs[k] = i
	return i
}

// has reports whether the attribute indices include key.
func (w *attrWriter) has(idx pcommon.Int32Slice, key string) bool {
	ki, ok := w.strs[key]
	if !ok {
		return false
	}
	at := w.dict.AttributeTable()
	for i := 0; i < idx.Len(); i++ {
		ai := idx.At(i)
		if ai > 0 && int(ai) < at.Len() && at.At(int(ai)).KeyStrindex() == ki {
			return true
		}
	}
	return false
}

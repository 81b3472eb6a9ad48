package buildidprocessor

import (
	"path/filepath"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/buildid"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// identifyFromProducer completes a resource that a producer other than
// hotpath's receiver sent (the OpenTelemetry eBPF profiler sends one
// resource per process, without service.name, and puts build IDs on the
// mappings as the profiles semantic conventions say):
//
//   - without service.name it gets the service hotpath's receiver would
//     give the process (profileschema.ProcessService: executable name, else
//     the thread name its samples carry), not one bucket for the host;
//   - without hotpath.build_id it gets the build IDs of its executable's
//     mapping, and the canonical ID derived from them.
//
// A resource that already has both (hotpath's own agents) is left alone.
func identifyFromProducer(dict pprofile.ProfilesDictionary, rp pprofile.ResourceProfiles) {
	attrs := rp.Resource().Attributes()
	_, hasService := attrs.Get(profileschema.AttrServiceName)
	_, hasBuild := attrs.Get(profileschema.AttrBuildID)
	if hasService && hasBuild {
		return
	}
	exeName, exePath := strAttr(attrs, profileschema.AttrProcessExeName), strAttr(attrs, profileschema.AttrProcessExePath)
	exe := exeName
	if exe == "" && exePath != "" {
		exe = filepath.Base(exePath)
	}
	var exeMapping pprofile.Mapping
	found := false
	threadName := ""
	walkResource(dict, rp, func(s pprofile.Sample, mappings []int32) bool {
		if threadName == "" {
			threadName = sampleAttr(dict, s, profileschema.AttrThreadName)
		}
		if !found && exe != "" {
			for _, mi := range mappings {
				m := dict.MappingTable().At(int(mi))
				// Producers name a mapping by the file's path or base name.
				if f := profileschema.Str(dict, m.FilenameStrindex()); f == exePath || filepath.Base(f) == exe {
					exeMapping, found = m, true
					break
				}
			}
		}
		return threadName == "" || (!found && exe != "")
	})
	if !hasService {
		attrs.PutStr(profileschema.AttrServiceName, profileschema.ProcessService(exeName, exePath, threadName))
	}
	if hasBuild || !found {
		return
	}
	info := buildid.FromAttributes(func(key string) (string, bool) { return mappingAttr(dict, exeMapping, key) })
	if info.Canonical() == "" {
		return
	}
	for _, kv := range info.Attributes() {
		attrs.PutStr(kv[0], kv[1])
	}
}

// walkResource calls fn for each sample of rp with the valid mapping
// indices its stack reaches, until fn returns false. Out-of-range indices
// are skipped: the aggregator counts them.
func walkResource(dict pprofile.ProfilesDictionary, rp pprofile.ResourceProfiles, fn func(s pprofile.Sample, mappings []int32) bool) {
	stacks, locs, maps := dict.StackTable(), dict.LocationTable(), dict.MappingTable()
	var mappings []int32
	sps := rp.ScopeProfiles()
	for i := 0; i < sps.Len(); i++ {
		profs := sps.At(i).Profiles()
		for j := 0; j < profs.Len(); j++ {
			samples := profs.At(j).Samples()
			for k := 0; k < samples.Len(); k++ {
				s := samples.At(k)
				mappings = mappings[:0]
				if si := s.StackIndex(); si > 0 && int(si) < stacks.Len() {
					li := stacks.At(int(si)).LocationIndices()
					for x := 0; x < li.Len(); x++ {
						if l := li.At(x); l > 0 && int(l) < locs.Len() {
							if mi := locs.At(int(l)).MappingIndex(); mi > 0 && int(mi) < maps.Len() {
								mappings = append(mappings, mi)
							}
						}
					}
				}
				if !fn(s, mappings) {
					return
				}
			}
		}
	}
}

func strAttr(attrs pcommon.Map, key string) string {
	if v, ok := attrs.Get(key); ok && v.Type() == pcommon.ValueTypeStr {
		return v.Str()
	}
	return ""
}

// mappingAttr is the string value of m's attribute key, if it has one.
func mappingAttr(dict pprofile.ProfilesDictionary, m pprofile.Mapping, key string) (string, bool) {
	return indexedAttr(dict, m.AttributeIndices(), key)
}

// sampleAttr is the string value of s's attribute key, or "".
func sampleAttr(dict pprofile.ProfilesDictionary, s pprofile.Sample, key string) string {
	v, _ := indexedAttr(dict, s.AttributeIndices(), key)
	return v
}

func indexedAttr(dict pprofile.ProfilesDictionary, idx pcommon.Int32Slice, key string) (string, bool) {
	at := dict.AttributeTable()
	for i := 0; i < idx.Len(); i++ {
		ai := idx.At(i)
		if ai <= 0 || int(ai) >= at.Len() {
			continue
		}
		kv := at.At(int(ai))
		if profileschema.Str(dict, kv.KeyStrindex()) == key && kv.Value().Type() == pcommon.ValueTypeStr && kv.Value().Str() != "" {
			return kv.Value().Str(), true
		}
	}
	return "", false
}

package sampler

import "github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/nodev8"

// SetV8 makes the sampler name the JavaScript frames of the Node.js
// process pid with its V8 layout l: each is put in the stack as its
// function (V8Function) and reported once (EventV8Function). The kernel
// forgets it at the process's exec or exit.
func (s *Sampler) SetV8(pid uint32, l *nodev8.Layout) error {
	v := cpuProfileV8Proc{FpContext: l.FPContext, FpFunction: l.FPFunction, OffMap: l.HeapObjectMap, OffType: l.MapInstanceType,
		OffShared: l.JSFunctionShared, FunctionFirst: l.FirstJSFunctionType, FunctionLast: l.LastJSFunctionType}
	return s.setProcess(s.objs.V8Procs, "V8 functions", pid, &v, int(s.objs.V8Procs.MaxEntries()))
}

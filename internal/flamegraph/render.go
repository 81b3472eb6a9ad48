package flamegraph

import (
	"bufio"
	"fmt"
	"hash/fnv"
	"html"
	"io"
	"math"
	"strings"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// Options control rendering.
type Options struct {
	Title    string
	Subtitle string // e.g. the service and time range
	Unit     string // what Value counts, "samples" by default
	// Diff colours frames by the change from Before to Value (both must be
	// on the same scale: shares, or Before scaled to Value's total): red
	// grew, blue shrank, white unchanged.
	Diff bool
	// MinWidth drops frames narrower than this many pixels at full view
	// (default 0.1): they cannot be seen or clicked, and a profile with
	// 100k tiny frames would otherwise make a file browsers choke on.
	MinWidth float64
	// FrameType says what a frame is (profileschema.FrameType*: python,
	// jit, native, kernel, go; "" unknown) by its name. When set, frames
	// are coloured by type and a legend names the colours; unknown frames
	// fall back to their name's suffix ("_[k]", "_[j]"). Ignored in diffs,
	// which colour by change.
	FrameType func(name string) string
}

// palette is a frame type's colour: each channel base + spread × a hash of
// the frame's name, so neighbouring frames of one type stay apart.
type palette struct{ base, spread [3]int }

// palettes by frame type, in legend order. native is flamegraph.pl's warm
// default; kernel and jit keep its java palette's orange and green.
var palettes = []struct {
	typ string
	pal palette
}{
	{profileschema.FrameTypePython, palette{[3]int{60, 120, 215}, [3]int{40, 50, 40}}},
	{profileschema.FrameTypeJIT, palette{[3]int{50, 180, 50}, [3]int{60, 50, 60}}},
	{profileschema.FrameTypeNative, palette{[3]int{205, 0, 0}, [3]int{50, 230, 55}}},
	{profileschema.FrameTypeKernel, palette{[3]int{220, 130, 40}, [3]int{30, 60, 20}}},
	{profileschema.FrameTypeGo, palette{[3]int{0, 173, 190}, [3]int{40, 50, 50}}},
}

func paletteOf(typ string) (palette, bool) {
	for _, p := range palettes {
		if p.typ == typ {
			return p.pal, true
		}
	}
	return palette{}, false
}

// rgb is p's colour at hash values v (each 0..1).
func (p palette) rgb(v [3]float64) string {
	var c [3]int
	for i := range c {
		c[i] = p.base[i] + int(float64(p.spread[i])*v[i])
	}
	return fmt.Sprintf("rgb(%d,%d,%d)", c[0], c[1], c[2])
}

// legendH is the header row the legend takes.
const legendH = 16.0

const (
	imageWidth  = 1200.0
	frameHeight = 16.0
	padX        = 10.0
	headerH     = 56.0
	footerH     = 34.0
	fontSize    = 12.0
	charWidth   = 0.59 * fontSize // Verdana-ish average; used to fit labels
)

// WriteSVG writes a standalone SVG document.
func WriteSVG(w io.Writer, root *Node, opt Options) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, `<?xml version="1.0" standalone="no"?>`)
	if err := writeSVG(bw, root, opt, true); err != nil {
		return err
	}
	return bw.Flush()
}

// WriteHTML writes an HTML page holding the SVG, scaled to the window.
func WriteHTML(w io.Writer, root *Node, opt Options) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%s</title>\n", html.EscapeString(title(opt)))
	fmt.Fprintln(bw, `<style>body{margin:0;background:#fff}svg{display:block;width:100%;height:auto}</style></head><body>`)
	if err := writeSVG(bw, root, opt, false); err != nil {
		return err
	}
	fmt.Fprintf(bw, "<script>\n%s\n</script>\n</body></html>\n", script)
	return bw.Flush()
}

func title(opt Options) string {
	if opt.Title != "" {
		return opt.Title
	}
	if opt.Diff {
		return "Differential Flame Graph"
	}
	return "Flame Graph"
}

type layout struct {
	opt      Options
	scale    float64 // pixels per unit of Value
	total    float64
	maxDelta float64
	height   float64
	depth    int
	bw       *bufio.Writer
	frames   int
}

func writeSVG(bw *bufio.Writer, root *Node, opt Options, standalone bool) error {
	if opt.Unit == "" {
		opt.Unit = "samples"
	}
	if opt.MinWidth <= 0 {
		opt.MinWidth = 0.1
	}
	root.sortChildren()
	l := &layout{opt: opt, bw: bw, total: root.Value}
	if root.Value <= 0 {
		return fmt.Errorf("render flame graph: the profile has no samples")
	}
	l.scale = (imageWidth - 2*padX) / root.Value
	l.depth = root.Depth()
	if opt.Diff {
		l.maxDelta = maxDelta(root)
	}
	l.height = headerH + float64(l.depth)*frameHeight + footerH
	legend := opt.FrameType != nil && !opt.Diff
	if legend {
		l.height += legendH
	}
	fmt.Fprintf(bw, `<svg version="1.1" width="%d" height="%d" viewBox="0 0 %d %d" xmlns="http://www.w3.org/2000/svg" data-width="%g" data-pad="%g" data-total="%g" data-unit="%s" data-diff="%t">`+"\n",
		int(imageWidth), int(l.height), int(imageWidth), int(l.height), imageWidth, padX, root.Value, html.EscapeString(opt.Unit), opt.Diff)
	fmt.Fprintf(bw, `<style>
text{font-family:Verdana,"DejaVu Sans",sans-serif;font-size:%gpx;fill:#000}
.f text{pointer-events:none}.f:hover rect{stroke:#000;stroke-width:0.8}
.btn{cursor:pointer;fill:#333}.btn:hover{fill:#b00}.hid{display:none}.anc rect{opacity:0.55}
#title{font-size:17px}#sub{fill:#555}
</style>
`, fontSize)
	bg := "#eeeeee"
	if opt.Diff {
		bg = "#f8f8f8"
	}
	fmt.Fprintf(bw, `<rect x="0" y="0" width="%d" height="%d" fill="%s"/>`+"\n", int(imageWidth), int(l.height), bg)
	fmt.Fprintf(bw, `<text id="title" x="%g" y="24" text-anchor="middle">%s</text>`+"\n", imageWidth/2, html.EscapeString(title(opt)))
	fmt.Fprintf(bw, `<text id="sub" x="%g" y="42" text-anchor="middle">%s</text>`+"\n", imageWidth/2, html.EscapeString(opt.Subtitle))
	fmt.Fprintf(bw, `<text id="unzoom" class="btn hid" x="%g" y="24">Reset Zoom</text>`+"\n", padX)
	fmt.Fprintf(bw, `<text id="search" class="btn" x="%g" y="24" text-anchor="end">Search</text>`+"\n", imageWidth-padX)
	fmt.Fprintf(bw, `<text id="matched" x="%g" y="%g" text-anchor="end"></text>`+"\n", imageWidth-padX, l.height-12)
	fmt.Fprintf(bw, `<text id="details" x="%g" y="%g">%s</text>`+"\n", padX, l.height-12, html.EscapeString(fmt.Sprintf("%s: %s %s", root.Name, num(root.Value), opt.Unit)))
	if legend {
		writeLegend(bw)
	}
	fmt.Fprintln(bw, `<g id="frames">`)
	l.node(root, 0, 0)
	fmt.Fprintln(bw, `</g>`)
	if standalone {
		fmt.Fprintf(bw, "<script type=\"text/ecmascript\"><![CDATA[\n%s\n]]></script>\n", script)
	}
	fmt.Fprintln(bw, `</svg>`)
	return nil
}

// writeLegend names the frame type colours under the subtitle, each swatch
// at its palette's middle.
func writeLegend(bw *bufio.Writer) {
	const y, box, step = headerH - 4, 10.0, 90.0
	x := imageWidth/2 - step*float64(len(palettes))/2
	fmt.Fprintln(bw, `<g id="legend">`)
	for _, p := range palettes {
		fmt.Fprintf(bw, `<rect class="legend" data-type="%s" x="%g" y="%g" width="%g" height="%g" fill="%s"/><text x="%g" y="%g">%s</text>`+"\n",
			p.typ, x, y, box, box, p.pal.rgb([3]float64{0.5, 0.5, 0.5}), x+box+4, y+box-1, p.typ)
		x += step
	}
	fmt.Fprintln(bw, `</g>`)
}

func maxDelta(n *Node) float64 {
	m := math.Abs(n.Value - n.Before)
	for _, c := range n.Children {
		m = math.Max(m, maxDelta(c))
	}
	return m
}

// node writes n at depth d starting at offset x (in Value units) and
// recurses; frames too narrow to see are dropped with their subtree.
func (l *layout) node(n *Node, d int, x float64) {
	w := n.Value * l.scale
	if w < l.opt.MinWidth {
		return
	}
	l.frames++
	px := padX + x*l.scale
	y := l.height - footerH - float64(d+1)*frameHeight
	pct := 100 * n.Value / l.total
	info := fmt.Sprintf("%s (%s %s, %.2f%%)", n.Name, num(n.Value), l.opt.Unit, pct)
	if l.opt.Diff {
		info = fmt.Sprintf("%s (%s %s; before %.2f%%, after %.2f%%, %+.2f pp)", n.Name, num(n.Value), l.opt.Unit,
			100*n.Before/l.total, pct, 100*(n.Value-n.Before)/l.total)
	}
	name := html.EscapeString(n.Name)
	fmt.Fprintf(l.bw, `<g class="f" data-x="%g" data-w="%g" data-d="%d" data-n="%s"><title>%s</title><rect x="%.2f" y="%g" width="%.2f" height="%g" fill="%s"/><text x="%.2f" y="%g">%s</text></g>`+"\n",
		x, n.Value, d, name, html.EscapeString(info), px, y, w, frameHeight-1, l.colour(n), px+3, y+frameHeight-4.5, html.EscapeString(fit(n.Name, w)))
	for _, c := range n.Children {
		l.node(c, d+1, x)
		x += c.Value
	}
}

// fit cuts a label to the frame's width ("" when not even 3 characters fit).
func fit(name string, width float64) string {
	n := int((width - 6) / charWidth)
	if n < 3 {
		return ""
	}
	r := []rune(name)
	if len(r) <= n {
		return name
	}
	return string(r[:n-2]) + ".."
}

func num(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// colour picks flamegraph.pl's "hot" palette by a hash of the name (stable
// across renders); kernel frames are orange, JIT frames (Node.js, Java,
// named from perf maps) green as in flamegraph.pl's java palette,
// unresolved addresses grey,
// build-ID roots light blue. Diffs use red/blue by change.
func (l *layout) colour(n *Node) string {
	if l.opt.Diff {
		if l.maxDelta == 0 {
			return "rgb(250,250,250)"
		}
		v := int(math.Round(210 * math.Abs(n.Value-n.Before) / l.maxDelta))
		if n.Value > n.Before {
			return fmt.Sprintf("rgb(255,%d,%d)", 255-v, 255-v)
		}
		if n.Value < n.Before {
			return fmt.Sprintf("rgb(%d,%d,255)", 255-v, 255-v)
		}
		return "rgb(250,250,250)"
	}
	h := fnv.New32a()
	h.Write([]byte(n.Name))
	s := h.Sum32()
	v := [3]float64{float64(s&0xff) / 255, float64(s>>8&0xff) / 255, float64(s>>16&0xff) / 255}
	typ := ""
	if l.opt.FrameType != nil {
		typ = l.opt.FrameType(n.Name)
	}
	if typ == "" {
		typ = profileschema.TypeFromName(n.Name)
	}
	// "0x…" names frames stored before profileschema.UnknownFrame was.
	unresolved := n.Name == profileschema.UnknownFrame || strings.Contains(n.Name, "+0x") || strings.HasPrefix(n.Name, "0x") || strings.HasPrefix(n.Name, "[build_id:")
	switch {
	case n.Name == "all":
		return "rgb(200,200,200)"
	case strings.HasPrefix(n.Name, "[build_id:") && !strings.Contains(n.Name, "] 0x"):
		return fmt.Sprintf("rgb(%d,%d,%d)", 120+int(40*v[0]), 170+int(40*v[1]), 230)
	case unresolved && (typ == "" || typ == profileschema.FrameTypeNative):
		g := 160 + int(50*v[0])
		return fmt.Sprintf("rgb(%d,%d,%d)", g, g, g)
	}
	if p, ok := paletteOf(typ); ok {
		return p.rgb(v)
	}
	p, _ := paletteOf(profileschema.FrameTypeNative)
	return p.rgb([3]float64{v[2], v[0], v[1]})
}

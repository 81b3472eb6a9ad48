package flamegraph

import (
	"bytes"
	"fmt"
	"html"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// bigTree has a hot function with 60% of the samples and about 2,000 other
// frames (40 services × 50 leaves), the size at which a flame graph must
// stay readable.
func bigTree() *Node {
	root := NewRoot()
	root.Add([]string{"main.main", "main.serve", "main.hotLoop"}, 6000, 0)
	for i := 0; i < 40; i++ {
		for j := 0; j < 50; j++ {
			root.Add([]string{"main.main", fmt.Sprintf("pkg%d.Handler", i), fmt.Sprintf("pkg%d.leaf%d", i, j)}, 2, 0)
		}
	}
	root.Add([]string{"main.main", "syscall.Syscall", "entry_SYSCALL_64_[k]", "do_syscall_64_[k]"}, 40, 0)
	root.Add([]string{"main.main", "[build_id:abc123def456] 0x1a2b"}, 40, 0)
	return root
}

func TestSVGStructure(t *testing.T) {
	root := bigTree()
	root.Add([]string{"main.main", `evil<script>"&'`}, 100, 0)
	var buf bytes.Buffer
	if err := WriteSVG(&buf, root, Options{Subtitle: "service api"}); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	frames := strings.Count(svg, `<g class="f"`)
	if frames != root.Count() {
		t.Fatalf("%d frames drawn, tree has %d", frames, root.Count())
	}
	if strings.Contains(svg, "evil<script>") || !strings.Contains(svg, "evil&lt;script&gt;&#34;&amp;&#39;") {
		t.Fatal("frame names are not escaped")
	}
	if !strings.Contains(svg, `data-n="main.hotLoop"`) || !strings.Contains(svg, ">main.hotLoop</text>") {
		t.Fatal("hot function not labelled")
	}
	// The hot frame is 6000 of 10180 samples: 58.9% of 1180 px, 695.5 px.
	m := regexp.MustCompile(`data-n="main.hotLoop"><title>[^<]*</title><rect x="[0-9.]+" y="[0-9.]+" width="([0-9.]+)"`).FindStringSubmatch(svg)
	if m == nil || !strings.HasPrefix(m[1], "69") {
		t.Fatalf("hot frame width: %v", m)
	}
	if err := WriteSVG(&bytes.Buffer{}, NewRoot(), Options{}); err == nil {
		t.Fatal("empty profile rendered")
	}
}

func TestTinyFramesAreDropped(t *testing.T) {
	root := NewRoot()
	root.Add([]string{"big"}, 1e6, 0)
	root.Add([]string{"tiny", "tinier"}, 1, 0) // 0.001 px
	var buf bytes.Buffer
	if err := WriteSVG(&buf, root, Options{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "tiny") {
		t.Fatal("sub-pixel frame drawn")
	}
}

func TestDiffColours(t *testing.T) {
	root := NewRoot()
	root.Add([]string{"main", "grew"}, 60, 20)
	root.Add([]string{"main", "shrank"}, 40, 80)
	var buf bytes.Buffer
	if err := WriteSVG(&buf, root, Options{Diff: true}); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	fill := func(name string) string {
		m := regexp.MustCompile(`data-n="` + name + `">.*?fill="([^"]+)"`).FindStringSubmatch(svg)
		if m == nil {
			t.Fatalf("no frame %s", name)
		}
		return m[1]
	}
	if fill("grew") != "rgb(255,45,45)" || fill("shrank") != "rgb(45,45,255)" || fill("main") != "rgb(250,250,250)" {
		t.Fatalf("fills: grew %s shrank %s main %s", fill("grew"), fill("shrank"), fill("main"))
	}
	if !strings.Contains(svg, "before 20.00%, after 60.00%, +40.00 pp") {
		t.Fatal("diff details missing")
	}
}

// chromium returns the browser, installing Debian's package when missing.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Log("chromium missing: installing the Debian package")
	// The repository's installer, which waits its turn when make run or
	// another test installs packages at the same time.
	cmd := exec.Command(filepath.Join("..", "..", "scripts", "apt-install.sh"), "chromium")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("install chromium: %v\n%s", err, out)
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir()}
	cmd := exec.Command(bin, append(base, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errOut.String())
	}
	return out.Bytes()
}

// TestChromiumRendersAndSearches opens the HTML and SVG in a real headless
// Chromium: the screenshot must show a flame graph (many distinct colours),
// and the DOM after the page's script ran must show the hot function and the
// search result the script computes (?s=).
func TestChromiumRendersAndSearches(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	root := bigTree()
	htmlPath := filepath.Join(dir, "flame.html")
	svgPath := filepath.Join(dir, "flame.svg")
	for path, write := range map[string]func(*bytes.Buffer) error{
		htmlPath: func(b *bytes.Buffer) error { return WriteHTML(b, root, Options{Subtitle: "service api, last hour"}) },
		svgPath:  func(b *bytes.Buffer) error { return WriteSVG(b, root, Options{Subtitle: "service api, last hour"}) },
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	shot := filepath.Join(dir, "flame.png")
	runChromium(t, bin, "--screenshot="+shot, "--window-size=1200,700", "--hide-scrollbars", "file://"+htmlPath)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decode screenshot: %v", err)
	}
	colours := map[[3]uint32]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 8, g >> 8, bl >> 8}]++
		}
	}
	t.Logf("screenshot %dx%d, %d distinct colours", b.Dx(), b.Dy(), len(colours))
	if len(colours) < 40 {
		t.Fatalf("screenshot looks blank: %d distinct colours", len(colours))
	}

	for _, path := range []string{htmlPath, svgPath} {
		dom := string(runChromium(t, bin, "--dump-dom", "file://"+path+"?s=hotLoop"))
		if !strings.Contains(dom, `data-ready="true"`) {
			t.Fatalf("%s: the page script did not run:\n%.2000s", path, dom)
		}
		if !strings.Contains(dom, ">main.hotLoop</text>") {
			t.Fatalf("%s: hot function not shown", path)
		}
		// 6000 of 10080 samples.
		if !strings.Contains(dom, "Matched: 59.5% (1 frames)") {
			m := regexp.MustCompile(`<text id="matched"[^>]*>[^<]*`).FindString(dom)
			t.Fatalf("%s: search result: %q", path, m)
		}
	}

	// Zoomed into pkg7.Handler (100 of 10080 samples, 11.7 px at full
	// view): it and its leaves fill the width, main.main stays as a dimmed
	// ancestor, the hot loop is hidden; the search counts the zoomed view.
	dom := string(runChromium(t, bin, "--dump-dom", "file://"+htmlPath+"?z=^pkg7%5C.Handler$&s=leaf"))
	frame := func(name string) string {
		return regexp.MustCompile(`<g class="([^"]*)"[^>]*data-n="` + regexp.QuoteMeta(name) + `"><title>[^<]*</title><rect x="([0-9.]+)" y="[0-9.]+" width="([0-9.]+)"`).FindString(dom)
	}
	for name, want := range map[string]string{
		"pkg7.Handler": `class="f" `, "main.main": `class="f anc"`, "main.hotLoop": `class="f hid"`,
	} {
		if f := frame(name); !strings.Contains(f, want) {
			t.Errorf("zoomed %s: %q, want %s", name, f, want)
		}
	}
	if f := frame("pkg7.Handler"); !strings.Contains(f, `x="10.00" y=`) || !strings.Contains(f, `width="1180.00"`) {
		t.Errorf("zoomed frame not full width: %q", f)
	}
	if f := frame("pkg7.leaf3"); !strings.Contains(f, `width="23.60"`) { // 2 of 100 samples
		t.Errorf("leaf in zoom: %q", f)
	}
	if !strings.Contains(dom, "Matched: 100.0% (50 frames)") {
		t.Errorf("search in zoom: %q", regexp.MustCompile(`<text id="matched"[^>]*>[^<]*`).FindString(dom))
	}
}

func BenchmarkWriteHTML(b *testing.B) {
	root := bigTree()
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		if err := WriteHTML(&buf, root, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "bytes/graph")
}

// Frames are coloured by type: kernel orange, JIT (perf-map named) green,
// native and Go in the warm palette.
func TestColourByFrameType(t *testing.T) {
	root := NewRoot()
	root.Add([]string{"main", "uv_run", "hotA_[j]", "Builtins_StringAdd", "asm_sysvec_apic_timer_interrupt_[k]"}, 100, 0)
	var buf bytes.Buffer
	if err := WriteSVG(&buf, root, Options{}); err != nil {
		t.Fatal(err)
	}
	fill := func(name string) (r, g, b int) {
		m := regexp.MustCompile(`data-n="` + regexp.QuoteMeta(name) + `">.*?fill="rgb\((\d+),(\d+),(\d+)\)"`).FindStringSubmatch(buf.String())
		if m == nil {
			t.Fatalf("frame %s not drawn", name)
		}
		fmt.Sscan(m[1], &r)
		fmt.Sscan(m[2], &g)
		fmt.Sscan(m[3], &b)
		return r, g, b
	}
	if r, g, b := fill("hotA_[j]"); !(g > r+50 && g > b+50) {
		t.Errorf("JIT frame rgb(%d,%d,%d), want green", r, g, b)
	}
	if r, g, b := fill("asm_sysvec_apic_timer_interrupt_[k]"); !(r > 200 && g >= 130 && b < 70) {
		t.Errorf("kernel frame rgb(%d,%d,%d), want orange", r, g, b)
	}
	for _, native := range []string{"uv_run", "Builtins_StringAdd"} {
		if r, g, b := fill(native); !(r >= 205 && b < 60 && g < 235) {
			t.Errorf("native frame %s rgb(%d,%d,%d), want the warm palette", native, r, g, b)
		}
	}
}

// With FrameType, frames take their type's colour whatever their name says
// (a CPython function has no suffix), the legend names every type once, and
// frames of unknown type keep the suffix and warm defaults.
func TestColourByStoredFrameType(t *testing.T) {
	types := map[string]string{"_start": "native", "<module>": "python", "handle": "python",
		"py::handle:/srv/app.py_[j]": "jit", "runtime.mallocgc": "go", "do_syscall_64_[k]": "kernel"}
	root := NewRoot()
	root.Add([]string{"_start", "<module>", "handle", "py::handle:/srv/app.py_[j]"}, 50, 0)
	root.Add([]string{"_start", "<module>", "do_syscall_64_[k]"}, 20, 0)
	root.Add([]string{"_start", "runtime.mallocgc", "untyped"}, 30, 0)
	var buf bytes.Buffer
	if err := WriteSVG(&buf, root, Options{FrameType: func(name string) string { return types[name] }}); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	rgb := func(s string) [3]int {
		var c [3]int
		if _, err := fmt.Sscanf(s, "rgb(%d,%d,%d)", &c[0], &c[1], &c[2]); err != nil {
			t.Fatalf("colour %q: %v", s, err)
		}
		return c
	}
	fill := func(name string) [3]int {
		m := regexp.MustCompile(`data-n="` + regexp.QuoteMeta(html.EscapeString(name)) + `">.*?fill="(rgb\([0-9,]+\))"`).FindStringSubmatch(svg)
		if m == nil {
			t.Fatalf("frame %s not drawn", name)
		}
		return rgb(m[1])
	}
	// The legend: one swatch per type, in a colour of that type's range.
	legend := regexp.MustCompile(`<rect class="legend" data-type="(\w+)"[^>]*fill="(rgb\([0-9,]+\))"`).FindAllStringSubmatch(svg, -1)
	var names []string
	for _, m := range legend {
		names = append(names, m[1])
	}
	if strings.Join(names, ",") != "python,jit,native,kernel,go" {
		t.Fatalf("legend types %v", names)
	}
	within := func(c [3]int, typ string) bool {
		p, ok := paletteOf(typ)
		if !ok {
			t.Fatalf("no palette for %s", typ)
		}
		for i := range c {
			if c[i] < p.base[i] || c[i] > p.base[i]+p.spread[i] {
				return false
			}
		}
		return true
	}
	for _, m := range legend {
		if !within(rgb(m[2]), m[1]) {
			t.Errorf("legend swatch %s is %s", m[1], m[2])
		}
	}
	for name, typ := range types {
		if c := fill(name); !within(c, typ) {
			t.Errorf("%s frame %s is rgb%v, outside the %s colours", typ, name, c, typ)
		}
	}
	// Python and JIT do not share colours with native code.
	for _, name := range []string{"<module>", "handle", "py::handle:/srv/app.py_[j]"} {
		if within(fill(name), "native") {
			t.Errorf("%s looks native: rgb%v", name, fill(name))
		}
	}
	if c := fill("untyped"); !within(c, "native") {
		t.Errorf("untyped frame rgb%v, want the warm default", c)
	}
	// No FrameType: no legend.
	buf.Reset()
	if err := WriteSVG(&buf, root, Options{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), `id="legend"`) {
		t.Error("legend drawn without frame types")
	}
}

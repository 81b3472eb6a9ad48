package procinfo

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// An interpreter's executable names the runtime, not the program: every
// Python service of a host would be one service, python3.11, every JVM
// java. appName finds the program an interpreter runs from its command
// line, as the runtime's own launcher reads it: the script or module of
// python, the jar or main class of java, the script of node (or its
// package's name), the assembly of dotnet. It returns "" when the command
// line names no program (python -c, node -e, an interactive interpreter,
// a dotnet SDK command): the executable's name stays the service then.
//
// files are the process's own files; node's package.json is read through
// them.
func appName(exeName string, args []string, files processFiles) string {
	if len(args) == 0 || !isInterpreter(exeName) {
		return ""
	}
	if !slices.ContainsFunc(args[1:], func(a string) bool { return a != "" }) {
		// A program that set its own title (node's process.title or
		// --title, Python's setproctitle: gunicorn's "gunicorn: worker
		// [app:app]") wrote it over its command line: the title's first
		// word names it. A bare interpreter ("python3") names nothing.
		first, _, _ := strings.Cut(strings.TrimSpace(args[0]), " ")
		name := filepath.Base(strings.TrimSuffix(first, ":"))
		if name == "." || name == "/" || isInterpreter(name) {
			return ""
		}
		return name
	}
	switch {
	case pythonExe.MatchString(exeName):
		return pythonApp(args[1:])
	case exeName == "java":
		return javaApp(args[1:])
	case exeName == "node" || exeName == "nodejs":
		return nodeApp(args[1:], files)
	case exeName == "dotnet":
		return dotnetApp(args[1:])
	}
	return ""
}

// pythonExe matches CPython's and PyPy's executables: python, python3,
// python3.12, python3.13t, pypy3.10.
var pythonExe = regexp.MustCompile(`^(python|pypy)(\d+(\.\d+)?[a-z]?)?$`)

func pythonApp(args []string) string {
	const py1, py2, py3 = ".py", ".pyz", ".pyc"
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "":
			continue
		case a == "-":
			return "" // the program comes on standard input
		case a == "--":
			if i+1 < len(args) {
				return scriptName(args[i+1], py1, py2, py3)
			}
			return ""
		case !strings.HasPrefix(a, "-"):
			return scriptName(a, py1, py2, py3)
		case a == "--check-hash-based-pycs":
			i++
			continue
		case strings.HasPrefix(a, "--"):
			continue // --version, --help and the like take no value
		}
		// Short options may be combined (-Bu); c, m, W and X take the
		// rest of the word, else the next one.
		for j := 1; j < len(a); j++ {
			switch a[j] {
			case 'c':
				return ""
			case 'm':
				mod := a[j+1:]
				if mod == "" && i+1 < len(args) {
					mod = args[i+1]
				}
				return strings.TrimSuffix(mod, ".__main__")
			case 'W', 'X':
				if j == len(a)-1 {
					i++ // the value is the next word
				}
				j = len(a)
			}
		}
	}
	return ""
}

// javaOptionsWithValue are the java launcher's options whose value is the
// next word (the --name=value forms are one word).
var javaOptionsWithValue = map[string]bool{
	"-cp": true, "-classpath": true, "--class-path": true,
	"-p": true, "--module-path": true, "--upgrade-module-path": true,
	"--add-modules": true, "--limit-modules": true, "--enable-native-access": true,
	"--add-reads": true, "--add-exports": true, "--add-opens": true, "--patch-module": true,
	"--source": true,
}

func javaApp(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "":
		case a == "-jar" || a == "--jar":
			if i+1 < len(args) {
				return scriptName(args[i+1], ".jar", ".war")
			}
			return ""
		case a == "-m" || a == "--module":
			if i+1 < len(args) {
				return moduleMain(args[i+1])
			}
			return ""
		case strings.HasPrefix(a, "--module="):
			return moduleMain(strings.TrimPrefix(a, "--module="))
		case javaOptionsWithValue[a]:
			i++
		case strings.HasPrefix(a, "-") || strings.HasPrefix(a, "@"):
			// -Xmx1g, -Dk=v, -XX:..., --add-opens=..., @argfiles
		default:
			// The main class, or a source file (java Main.java).
			return scriptName(a, ".java")
		}
	}
	return ""
}

// moduleMain is the main class of "module/class", else the module.
func moduleMain(s string) string {
	if _, class, ok := strings.Cut(s, "/"); ok && class != "" {
		return class
	}
	return s
}

// nodeOptionsWithValue are node's options whose value is the next word.
var nodeOptionsWithValue = map[string]bool{
	"-r": true, "--require": true, "--import": true, "--loader": true, "--experimental-loader": true,
	"-C": true, "--conditions": true, "--title": true, "--env-file": true, "--input-type": true,
	"--inspect-port": true,
}

func nodeApp(args []string, files processFiles) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "":
		case a == "-e" || a == "--eval" || a == "-p" || a == "--print" || a == "-i" || a == "--interactive" || a == "-":
			return ""
		case a == "--":
			if i+1 < len(args) {
				return nodeScript(args[i+1], files)
			}
			return ""
		case nodeOptionsWithValue[a]:
			i++
		case strings.HasPrefix(a, "-"):
		default:
			return nodeScript(a, files)
		}
	}
	return ""
}

// processFiles are a process's own files, as it sees them.
type processFiles interface {
	// Abs makes a path of the process's command line absolute, from its
	// working directory; "" when that cannot be read.
	Abs(path string) string
	// ReadFile reads a small file at an absolute path inside the
	// process's root.
	ReadFile(abs string) ([]byte, error)
}

// packageLevels bounds how far up from a script the agent looks for its
// package.json: one read each, for every node process it meets.
const packageLevels = 8

// nodeScript names a node program by its package: the "name" of the
// nearest package.json up from the script, as Node.js finds a file's
// package scope (dist/index.js, a monorepo's packages/api/dist/main.js, a
// node_modules/.bin link in the project's directory), else by the
// script's name.
func nodeScript(script string, files processFiles) string {
	if files != nil {
		if abs := files.Abs(script); abs != "" {
			for d, i := filepath.Dir(abs), 0; i < packageLevels; d, i = filepath.Dir(d), i+1 {
				raw, err := files.ReadFile(filepath.Join(d, "package.json"))
				if err == nil {
					var pkg struct {
						Name string `json:"name"`
					}
					if json.Unmarshal(raw, &pkg) == nil && pkg.Name != "" {
						return pkg.Name
					}
					break // the nearest package has no name: its script names it
				}
				if d == "/" {
					break
				}
			}
		}
	}
	return scriptName(script, ".js", ".mjs", ".cjs", ".ts")
}

func dotnetApp(args []string) string {
	if len(args) == 0 {
		return ""
	}
	a := args[0]
	if a == "exec" && len(args) > 1 {
		// dotnet exec [--runtimeconfig FILE ...] app.dll
		for i := 1; i < len(args); i++ {
			if strings.HasSuffix(args[i], ".dll") {
				return scriptName(args[i], ".dll")
			}
		}
		return ""
	}
	if strings.HasSuffix(a, ".dll") {
		return scriptName(a, ".dll")
	}
	return "" // an SDK command: dotnet build, dotnet test, ...
}

// scriptName is a program file's base name without the extensions given;
// a package's entry point (__main__.py) is named by its directory.
func scriptName(path string, exts ...string) string {
	base := filepath.Base(path)
	for _, ext := range exts {
		if name, ok := strings.CutSuffix(base, ext); ok && name != "" {
			base = name
			break
		}
	}
	if base == "__main__" {
		return filepath.Base(filepath.Dir(path))
	}
	if base == "." || base == "/" {
		return ""
	}
	return base
}

// isInterpreter reports whether appName can name what an executable of
// this name runs.
func isInterpreter(exeName string) bool {
	switch exeName {
	case "java", "node", "nodejs", "dotnet":
		return true
	}
	return pythonExe.MatchString(exeName)
}

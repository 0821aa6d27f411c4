package nvrtc

type Program struct{ p uintptr }
type Include struct{ Source, Name string }

func Version() (major, minor int, err error)                                 { return }
func CreateProgram(source, name string, headers ...Include) (Program, error) { return Program{}, nil }
func (program *Program) Destroy() error                                      { return nil }
func (program *Program) Compile(options ...string) error                     { return nil }
func (program *Program) GetPTX() (string, error)                             { return "", nil }
func (program *Program) GetLog() (string, error)                             { return "", nil }

module github.com/meshrun/meshrun

go 1.26.8

require (
	github.com/alecthomas/participle/v2 v2.1.4
	github.com/stretchr/testify v1.12.1
	golang.org/x/term v0.48.0
	gonum.org/v1/gonum v0.17.0
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

module github.com/fnrunner/fnrunner/tools/doublestar402

go 1.26

require github.com/bmatcuk/doublestar/v4 v4.0.2

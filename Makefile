# `make install PREFIX=/opt/ferry`: build (release) and install ferry as an MPI installation.
# `make wheel`: build (release) and pack the same tree as the ferry-mpi wheel, in target/wheel/.
PREFIX ?= /usr/local

.PHONY: install wheel
install:
	scripts/install.sh "$(PREFIX)"

wheel:
	cargo build --release -p ferry-cli -p ferry-mpi -p ferry-bsplib
	python3 scripts/wheel.py

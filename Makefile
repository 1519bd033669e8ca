# `make install PREFIX=/opt/ferry`: build (release) and install ferry as an MPI installation.
PREFIX ?= /usr/local

.PHONY: install
install:
	scripts/install.sh "$(PREFIX)"

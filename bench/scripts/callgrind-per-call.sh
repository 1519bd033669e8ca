#!/bin/sh
# callgrind-per-call.sh SENDER.out RECEIVER.out: instructions per call of the rows of the README's table
# (inclusive counts from callgrind_annotate divided by the calls of the 2000 x 64 window).
incl() { callgrind_annotate --inclusive=yes "$1" 2>/dev/null | grep -F "$2" | grep -F '[' | head -1 | awk '{gsub(",","",$1); print $1}'; }
row() { v=$(incl "$1" "$2"); if [ -z "$v" ]; then printf '%-60s %8s\n' "$3" "inlined"; else printf '%-60s %8.0f\n' "$3" "$(echo "$v / $4" | bc -l)"; fi; }
S=$1; R=$2
echo "sender"
row $S ":MPI_Isend " "MPI_Isend" 128000
row $S "Dense::send_now " "  Dense::send_now" 128000
row $S "raw_send_now " "  raw_send_now" 130000
row $S "send_eager_now " "  send_eager_now" 130000
row $S "ShmTransport::try_push " "  ShmTransport::try_push" 130000
row $S ":MPI_Waitall " "MPI_Waitall per request" 128000
echo "receiver"
row $R ":MPI_Irecv " "MPI_Irecv" 128000
row $R "Dense::post_into " "  Dense::post_into" 128000
row $R "raw_recv " "  raw_recv" 130000
row $R "Engine>::irecv " "  engine irecv" 130000
row $R "Requests::insert " "  Requests::insert" 130000
row $R "Engine>::progress_pass " "progress_pass per message" 128000
row $R "FrameSink>::begin_frame " "  begin_frame" 130000
row $R "FrameSink>::end_frame " "  end_frame" 130000
row $R "Frame::decode " "  Frame::decode" 130000
row $R ":MPI_Waitall " "MPI_Waitall per request" 128000

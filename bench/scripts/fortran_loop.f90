! The Fortran half of the binding-cost benchmark (bench/scripts/fortran-bench.sh): a ping-pong
! of 8 bytes between ranks 0 and 1 and an 8-byte MPI_Allreduce over all ranks, each timed over
! many iterations after a warm-up, and each rank's Isend/Irecv/Waitall with itself, in
! `use mpi_f08`. fortran_loop.c is the same loops in C.
! Prints `test,bytes,ranks,iterations,usec` lines (usec: per round trip / per allreduce).
program fortran_loop
    use mpi_f08
    implicit none
    integer, parameter :: warmup = 2000, iterations = 50000
    integer :: rank, nranks, i
    double precision :: x(1), y(1), t0, t1
    real :: c0, c1
    type(MPI_Request) :: requests(2)
    call MPI_Init()
    call MPI_Comm_rank(MPI_COMM_WORLD, rank)
    call MPI_Comm_size(MPI_COMM_WORLD, nranks)
    x = rank
    do i = 1, warmup + iterations
        if (i == warmup + 1) t0 = MPI_Wtime()
        if (rank == 0) then
            call MPI_Send(x, 1, MPI_DOUBLE_PRECISION, 1, 0, MPI_COMM_WORLD)
            call MPI_Recv(y, 1, MPI_DOUBLE_PRECISION, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
        else if (rank == 1) then
            call MPI_Recv(y, 1, MPI_DOUBLE_PRECISION, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
            call MPI_Send(x, 1, MPI_DOUBLE_PRECISION, 0, 0, MPI_COMM_WORLD)
        end if
    end do
    t1 = MPI_Wtime()
    if (rank == 0) print '(a,i0,a,i0,a,f0.3)', 'pingpong,8,', nranks, ',', iterations, ',', (t1 - t0) * 1d6 / iterations
    call MPI_Barrier(MPI_COMM_WORLD)
    do i = 1, warmup + iterations
        if (i == warmup + 1) t0 = MPI_Wtime()
        call MPI_Allreduce(x, y, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)
    end do
    t1 = MPI_Wtime()
    if (rank == 0) print '(a,i0,a,i0,a,f0.3)', 'allreduce,8,', nranks, ',', iterations, ',', (t1 - t0) * 1d6 / iterations
    ! Each rank with itself: Irecv + Isend + Waitall on MPI_COMM_SELF, where the time is the
    ! library's and the binding's, not the other rank's.
    call MPI_Barrier(MPI_COMM_WORLD)
    do i = 1, warmup + iterations
        if (i == warmup + 1) then
            t0 = MPI_Wtime()
            call cpu_time(c0)
        end if
        call MPI_Irecv(y, 1, MPI_DOUBLE_PRECISION, 0, 0, MPI_COMM_SELF, requests(1))
        call MPI_Isend(x, 1, MPI_DOUBLE_PRECISION, 0, 0, MPI_COMM_SELF, requests(2))
        call MPI_Waitall(2, requests, MPI_STATUSES_IGNORE)
    end do
    t1 = MPI_Wtime()
    call cpu_time(c1)
    if (rank == 0) print '(a,i0,a,i0,a,f0.3)', 'self-isend-irecv-waitall,8,', nranks, ',', iterations, ',', &
        (t1 - t0) * 1d6 / iterations
    ! The same in processor time: what the calls cost, without the time others had the core.
    if (rank == 0) print '(a,i0,a,i0,a,f0.3)', 'self-isend-irecv-waitall-cpu,8,', nranks, ',', iterations, ',', &
        (c1 - c0) * 1d6 / iterations
    call MPI_Finalize()
end program fortran_loop

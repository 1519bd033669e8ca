! Jacobi iteration for Laplace's equation on an N x N grid, rows split across the ranks, in
! Fortran 2008 with `use mpi_f08`. The top edge is held at 1, the others at 0; each sweep
! exchanges one halo row with each neighbour (MPI_Isend/MPI_Irecv/MPI_Waitall), and every 10
! sweeps an MPI_Allreduce of the largest change decides whether to stop.
!
!   mpifort -O2 examples/fortran/jacobi.f90 -o jacobi && mpiexec -n 4 ./jacobi [N]
!
! Prints the sweeps, the final change and a checksum (the sum of the grid), which do not
! depend on the number of ranks: a run at 1 and at 8 ranks print the same numbers.
program jacobi
    use mpi_f08
    implicit none
    integer, parameter :: dp = kind(1.0d0)
    real(dp), parameter :: tolerance = 1.0d-6
    integer, parameter :: max_sweeps = 100000
    integer :: n, rank, nranks, first, last, rows, up, down, sweep, i, j
    real(dp), allocatable :: u(:, :), unew(:, :)
    real(dp) :: local_change, change, local_sum, total
    type(MPI_Request) :: requests(4)
    character(len=32) :: arg

    call MPI_Init()
    call MPI_Comm_rank(MPI_COMM_WORLD, rank)
    call MPI_Comm_size(MPI_COMM_WORLD, nranks)
    n = 64
    if (command_argument_count() >= 1) then
        call get_command_argument(1, arg)
        read (arg, *) n
    end if
    if (n < nranks) then
        if (rank == 0) print '(a,i0,a,i0,a)', 'jacobi: N = ', n, ' is less than the ', nranks, ' ranks'
        call MPI_Abort(MPI_COMM_WORLD, 2)
    end if

    ! Interior rows 1..n-2 are shared out; rows 0 and n-1 are the fixed edges.
    first = 1 + (rank * (n - 2)) / nranks
    last = ((rank + 1) * (n - 2)) / nranks
    rows = last - first + 1
    up = merge(MPI_PROC_NULL, rank - 1, rank == 0)
    down = merge(MPI_PROC_NULL, rank + 1, rank == nranks - 1)

    ! Columns are the first index (contiguous), so a row of the grid is u(:, r).
    allocate (u(0:n - 1, first - 1:last + 1), unew(0:n - 1, first - 1:last + 1))
    u = 0
    if (first - 1 == 0) u(:, 0) = 1
    unew = u

    do sweep = 1, max_sweeps
        call MPI_Irecv(u(:, first - 1), n, MPI_DOUBLE_PRECISION, up, 1, MPI_COMM_WORLD, requests(1))
        call MPI_Irecv(u(:, last + 1), n, MPI_DOUBLE_PRECISION, down, 2, MPI_COMM_WORLD, requests(2))
        call MPI_Isend(u(:, first), n, MPI_DOUBLE_PRECISION, up, 2, MPI_COMM_WORLD, requests(3))
        call MPI_Isend(u(:, last), n, MPI_DOUBLE_PRECISION, down, 1, MPI_COMM_WORLD, requests(4))
        call MPI_Waitall(4, requests, MPI_STATUSES_IGNORE)

        local_change = 0
        do j = first, last
            do i = 1, n - 2
                unew(i, j) = 0.25_dp * (u(i - 1, j) + u(i + 1, j) + u(i, j - 1) + u(i, j + 1))
                local_change = max(local_change, abs(unew(i, j) - u(i, j)))
            end do
        end do
        u(:, first:last) = unew(:, first:last)

        if (mod(sweep, 10) == 0) then
            call MPI_Allreduce(local_change, change, 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD)
            if (change < tolerance) exit
        end if
    end do

    local_sum = sum(u(:, first:last))
    call MPI_Reduce(local_sum, total, 1, MPI_DOUBLE_PRECISION, MPI_SUM, 0, MPI_COMM_WORLD)
    if (rank == 0) then
        total = total + n  ! the top edge
        print '(a,i0,a,i0,a,es10.3,a,f0.6)', 'jacobi: ', n, 'x', n, ' grid, change ', change, ', sum ', total
        print '(a,i0,a,i0)', 'jacobi: sweeps ', min(sweep, max_sweeps), ', ranks ', nranks
    end if
    call MPI_Finalize()
end program jacobi

! mpi_f08 with MPI_SUBARRAYS_SUPPORTED: non-contiguous array sections as choice buffers of
! blocking and nonblocking point-to-point calls and collectives, reaching the section in place
! (a(1:n:2), b(:, 3), c(2:8:3, 1:5:2), reversed d(n:1:-1)), persistent requests started twice,
! derived-type elements with a struct datatype, COMPLEX elements as pairs of MPI_REAL;
! MPI_IN_PLACE with a section; a section whose datatype has gaps (a copy for a blocking call, an
! error for a nonblocking one); a count past the end of a section (an error).
! Elements outside the sections must stay as they were. Any number of ranks; prints
! " No Errors" when every check holds.
program subarrays08
    use mpi_f08
    implicit none
    integer, parameter :: n = 20
    integer :: rank, nranks, errs, ierr, i, j, peer, total
    integer, asynchronous :: a(n), b(n, 6), c(9, 6)
    double precision, asynchronous :: d(n), e(2 * n)
    type(MPI_Request) :: reqs(2)
    type(MPI_Datatype) :: gapped
    type(MPI_Status) :: status

    errs = 0
    call MPI_Init()
    call MPI_Comm_rank(MPI_COMM_WORLD, rank)
    call MPI_Comm_size(MPI_COMM_WORLD, nranks)
    if (.not. MPI_SUBARRAYS_SUPPORTED .or. .not. MPI_ASYNC_PROTECTS_NONBLOCKING) call fail("constants")

    ! Send/Recv of a(1:n:2) to the next rank, b(:, 3) back to the previous one.
    peer = mod(rank + 1, nranks)
    a = -1
    b = -1
    if (nranks > 1) then
        if (rank == 0) then
            a = [(100 + i, i = 1, n)]
            call MPI_Send(a(1:n:2), n / 2, MPI_INTEGER, 1, 1, MPI_COMM_WORLD)
            call MPI_Recv(b(:, 3), n, MPI_INTEGER, nranks - 1, 2, MPI_COMM_WORLD, status)
            do j = 1, 6
                do i = 1, n
                    if (b(i, j) /= merge(300 + i, -1, j == 3)) call fail("recv b(:, 3)")
                end do
            end do
        else if (rank == 1) then
            call MPI_Recv(a(1:n:2), n / 2, MPI_INTEGER, 0, 1, MPI_COMM_WORLD, status)
            do i = 1, n
                if (a(i) /= merge(100 + i, -1, mod(i, 2) == 1)) call fail("recv a(1:n:2)")
            end do
        end if
        if (rank == nranks - 1) then
            b(:, 3) = [(300 + i, i = 1, n)]
            call MPI_Send(b(:, 3), n, MPI_INTEGER, 0, 2, MPI_COMM_WORLD)
        end if
    end if

    ! Isend/Irecv + Waitall: c(2:8:3, 1:5:2) (9 elements, two dimensions) around a ring, the
    ! buffers touched only after the wait.
    c = rank
    do j = 1, 5, 2
        do i = 2, 8, 3
            c(i, j) = 1000 * rank + 10 * i + j
        end do
    end do
    e = -1
    d = [(rank + 0.5d0 * i, i = 1, n)]
    call MPI_Irecv(e(2 * n:2:-2), n, MPI_DOUBLE_PRECISION, mod(rank + nranks - 1, nranks), 3, MPI_COMM_WORLD, &
                   reqs(1))
    call MPI_Isend(d(n:1:-1), n, MPI_DOUBLE_PRECISION, peer, 3, MPI_COMM_WORLD, reqs(2))
    call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE)
    ! e(2n), e(2n-2), ... got d(n), d(n-1), ... of the previous rank: e(2k) = d(k).
    do i = 1, 2 * n
        if (mod(i, 2) == 0) then
            if (e(i) /= mod(rank + nranks - 1, nranks) + 0.5d0 * (i / 2)) call fail("irecv e(2n:2:-2)")
        else if (e(i) /= -1) then
            call fail("irecv e: an odd element changed")
        end if
    end do
    call MPI_Irecv(c(2:8:3, 1:5:2), 9, MPI_INTEGER, mod(rank + nranks - 1, nranks), 4, MPI_COMM_WORLD, reqs(1))
    ! The send reads the section of a copy: the receive writes the section of c itself.
    block
        integer, asynchronous :: csend(9, 6)
        csend = c
        call MPI_Isend(csend(2:8:3, 1:5:2), 9, MPI_INTEGER, peer, 4, MPI_COMM_WORLD, reqs(2))
        call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE)
    end block
    do j = 1, 6
        do i = 1, 9
            if (mod(i, 3) == 2 .and. i <= 8 .and. mod(j, 2) == 1 .and. j <= 5) then
                if (c(i, j) /= 1000 * mod(rank + nranks - 1, nranks) + 10 * i + j) call fail("irecv c section")
            else if (c(i, j) /= rank) then
                call fail("irecv c: an element outside the section changed")
            end if
        end do
    end do

    ! Persistent requests on sections, started twice: the made datatype outlives the _init call.
    a = -1
    call MPI_Recv_init(a(n:2:-2), n / 2, MPI_INTEGER, mod(rank + nranks - 1, nranks), 5, MPI_COMM_WORLD, reqs(1))
    block
        integer, asynchronous :: asend(n)
        call MPI_Send_init(asend(1:n:2), n / 2, MPI_INTEGER, peer, 5, MPI_COMM_WORLD, reqs(2))
        do j = 1, 2
            asend = [(100 * j + i, i = 1, n)]
            call MPI_Startall(2, reqs)
            call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE)
            ! a(n), a(n-2), ... got asend(1), asend(3), ...: a(n + 1 - i) = asend(i) for odd i.
            do i = 1, n
                if (a(i) /= merge(100 * j + n + 1 - i, -1, mod(i, 2) == 0)) call fail("persistent recv a(n:2:-2)")
            end do
        end do
        call MPI_Request_free(reqs(1))
        call MPI_Request_free(reqs(2))
    end block

    ! A section of derived-type elements with a struct datatype that has a gap (one per element),
    ! and of COMPLEX elements as twice as many MPI_REALs, both nonblocking.
    block
        type particle
            sequence
            integer :: id
            double precision :: x
        end type particle
        type(particle), asynchronous :: p(8), psend(8)
        complex, asynchronous :: z(6), zsend(6)
        type(MPI_Datatype) :: ptype, tmp
        integer(kind=MPI_ADDRESS_KIND) :: base, disp(2)
        call MPI_Get_address(p(1)%id, base)
        call MPI_Get_address(p(1)%x, disp(2))
        disp = [0_MPI_ADDRESS_KIND, disp(2) - base]
        call MPI_Type_create_struct(2, [1, 1], disp, [MPI_INTEGER, MPI_DOUBLE_PRECISION], tmp)
        call MPI_Type_create_resized(tmp, 0_MPI_ADDRESS_KIND, int(storage_size(p(1)) / 8, MPI_ADDRESS_KIND), ptype)
        call MPI_Type_commit(ptype)
        call MPI_Type_free(tmp)
        p = particle(-1, -1d0)
        psend = [(particle(100 * rank + i, rank + 0.25d0 * i), i = 1, 8)]
        z = (-1.0, -1.0)
        zsend = [(cmplx(rank, i), i = 1, 6)]
        call MPI_Irecv(p(2:8:2), 3, ptype, mod(rank + nranks - 1, nranks), 6, MPI_COMM_WORLD, reqs(1))
        call MPI_Isend(psend(1:5:2), 3, ptype, peer, 6, MPI_COMM_WORLD, reqs(2))
        call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE)
        do i = 1, 8
            if (mod(i, 2) == 0 .and. i <= 6) then
                if (p(i)%id /= 100 * mod(rank + nranks - 1, nranks) + i - 1 .or. &
                    p(i)%x /= mod(rank + nranks - 1, nranks) + 0.25d0 * (i - 1)) call fail("irecv p(2:8:2)")
            else if (p(i)%id /= -1 .or. p(i)%x /= -1d0) then
                call fail("irecv p: an element outside the section changed")
            end if
        end do
        call MPI_Irecv(z(1:6:2), 6, MPI_REAL, mod(rank + nranks - 1, nranks), 7, MPI_COMM_WORLD, reqs(1))
        call MPI_Isend(zsend(6:1:-2), 6, MPI_REAL, peer, 7, MPI_COMM_WORLD, reqs(2))
        call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE)
        ! z(1), z(3), z(5) got zsend(6), zsend(4), zsend(2) of the previous rank.
        do i = 1, 6
            if (z(i) /= merge(cmplx(mod(rank + nranks - 1, nranks), 7 - i), (-1.0, -1.0), mod(i, 2) == 1)) &
                call fail("irecv z(1:6:2) as MPI_REAL")
        end do
        call MPI_Type_free(ptype)
    end block

    ! Bcast of b(2, 1:6:2) from the last rank.
    b = rank
    if (rank == nranks - 1) b(2, 1:6:2) = [7, 8, 9]
    call MPI_Bcast(b(2, 1:6:2), 3, MPI_INTEGER, nranks - 1, MPI_COMM_WORLD)
    if (any(b(2, 1:6:2) /= [7, 8, 9])) call fail("bcast b(2, 1:6:2)")
    if (any(b(2, 2:6:2) /= rank) .or. any(b(1, :) /= rank) .or. any(b(3:, :) /= rank)) &
        call fail("bcast: an element outside the section changed")

    ! Ibcast of a(n:1:-3) (7 elements, reversed).
    a = rank
    if (rank == 0) a(n:1:-3) = [(50 + i, i = 1, 7)]
    call MPI_Ibcast(a(n:1:-3), 7, MPI_INTEGER, 0, MPI_COMM_WORLD, reqs(1))
    call MPI_Wait(reqs(1), MPI_STATUS_IGNORE)
    if (any(a(n:1:-3) /= [(50 + i, i = 1, 7)])) call fail("ibcast a(n:1:-3)")
    do i = 1, n
        if (mod(n - i, 3) /= 0 .and. a(i) /= rank) call fail("ibcast: an element outside the section changed")
    end do

    ! Allreduce of strided send and receive sections of one shape, then in place.
    total = nranks * (nranks - 1) / 2
    d = [(rank + i, i = 1, n)]
    e = -1
    call MPI_Allreduce(d(1:n:2), e(1:2 * n:4), n / 2, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)
    do i = 1, 2 * n
        if (mod(i, 4) == 1) then
            if (e(i) /= total + nranks * (2 * (i / 4) + 1)) call fail("allreduce into e(1:2n:4)")
        else if (e(i) /= -1) then
            call fail("allreduce: an element outside the section changed")
        end if
    end do
    ! Sections of one shape: one datatype made for both, the reduction run over it; also as a
    ! nonblocking call.
    e = -1
    call MPI_Iallreduce(d(2:n:2), e(2:n:2), n / 2, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, reqs(1))
    call MPI_Wait(reqs(1), MPI_STATUS_IGNORE)
    do i = 1, 2 * n
        if (e(i) /= merge(nranks - 1d0 + i, -1d0, mod(i, 2) == 0 .and. i <= n)) call fail("iallreduce into e(2:n:2)")
    end do
    b = 1
    b(:, 2) = rank
    call MPI_Allreduce(MPI_IN_PLACE, b(1:n:3, 2), 7, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
    do i = 1, n
        if (b(i, 2) /= merge(total, rank, mod(i, 3) == 1)) call fail("allreduce in place into b(1:n:3, 2)")
    end do
    if (any(b(:, 1) /= 1) .or. any(b(:, 3:) /= 1)) call fail("allreduce in place: another column changed")

    ! Iallreduce in place on a 2-d section, completed by MPI_Wait.
    c = 1
    call MPI_Iallreduce(MPI_IN_PLACE, c(1:9:4, 2:6:2), 9, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, reqs(1))
    call MPI_Wait(reqs(1), MPI_STATUS_IGNORE)
    if (any(c /= 1)) call fail("iallreduce in place of ones")

    ! A datatype with gaps (two integers of every three) over a section: a blocking call copies
    ! the section, a nonblocking one says it cannot reach it in place.
    call MPI_Type_vector(2, 1, 2, MPI_INTEGER, gapped)
    call MPI_Type_commit(gapped)
    a = rank
    if (rank == 0) a(1:n:2) = [(i, i = 1, n / 2)]
    call MPI_Bcast(a(1:n:2), 3, gapped, 0, MPI_COMM_WORLD)
    ! 3 vectors read elements 1, 3 of each 3 of the section: a(1), a(5), a(7), a(11), a(13), a(17).
    if (a(1) /= 1 .or. a(5) /= 3 .or. a(7) /= 4 .or. a(11) /= 6 .or. a(13) /= 7 .or. a(17) /= 9) &
        call fail("bcast with a vector type over a(1:n:2)")
    call MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)
    call MPI_Ibcast(a(1:n:2), 3, gapped, 0, MPI_COMM_WORLD, reqs(1), ierr)
    if (ierr /= MPI_ERR_BUFFER) call fail("ibcast with a vector type over a section: not MPI_ERR_BUFFER")
    ! A count that reaches past the section is refused rather than read or written past it.
    call MPI_Bcast(a(1:n:2), 4, gapped, 0, MPI_COMM_WORLD, ierr)
    if (ierr /= MPI_ERR_BUFFER) call fail("bcast of 4 vectors over 10 elements: not MPI_ERR_BUFFER")
    call MPI_Bcast(a(1:n:2), n, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
    if (ierr /= MPI_ERR_BUFFER) call fail("bcast of n integers over n/2 elements: not MPI_ERR_BUFFER")
    call MPI_Type_free(gapped)

    call MPI_Reduce(errs, i, 1, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD)
    if (rank == 0) then
        if (i == 0) then
            print '(A)', ' No Errors'
        else
            print '(A, I0, A)', ' Found ', i, ' errors'
        end if
    end if
    call MPI_Finalize()
contains
    subroutine fail(what)
        character(len=*), intent(in) :: what
        errs = errs + 1
        if (errs <= 10) print '(A, I0, 2A)', 'rank ', rank, ': ', what
    end subroutine fail
end program subarrays08

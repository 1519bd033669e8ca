! MUMPS on a 3-d finite-difference operator (7 points on an m x m x m grid; with convection,
! so not symmetric, for SYM=0), built by conformance/mumps:
!
!   mpiexec -n P ./laplace SYM DIST NRHS M
!
! SYM 0 (LU), 1 (symmetric positive definite, LDL^T) or 2 (general symmetric); DIST 0: the
! matrix given on rank 0, 3: every rank gives its share of the entries (ICNTL(18)=3); NRHS
! right-hand sides made from known solutions. It analyses, factors and solves (JOB=6), then
! factors the matrix scaled by 2 again on the same analysis (JOB=2) and solves (JOB=3). Both
! solutions must match the known ones to 1e-9 (relative, largest component). Prints
! " No Errors" when they do. ICNTL(13)=1: no ScaLAPACK on the root node (see no_scalapack.c).
program laplace
    implicit none
    include 'mpif.h'
    include 'dmumps_struc.h'
    type(DMUMPS_STRUC) :: id
    integer :: ierr, sym, dist, nrhs, m, n, nnz, k, rank, nranks, errs, round
    integer :: i, j, l, row, r
    character(len=16) :: arg
    integer, allocatable :: irn(:), jcn(:)
    double precision, allocatable :: a(:), x(:, :), b(:, :)
    double precision :: err, scale

    call MPI_Init(ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
    call get_command_argument(1, arg); read (arg, *) sym
    call get_command_argument(2, arg); read (arg, *) dist
    call get_command_argument(3, arg); read (arg, *) nrhs
    call get_command_argument(4, arg); read (arg, *) m
    n = m * m * m
    errs = 0

    ! Every rank builds the whole matrix (it is small); what each gives MUMPS depends on DIST.
    allocate (irn(7 * n), jcn(7 * n), a(7 * n))
    nnz = 0
    do k = 1, m
        do j = 1, m
            do i = 1, m
                row = i + m * (j - 1) + m * m * (k - 1)
                call entry(row, row, 6.0d0 + merge(0.1d0, 0.0d0, sym == 0))
                if (i > 1) call entry(row, row - 1, -1.0d0 - merge(0.3d0, 0.0d0, sym == 0))
                if (i < m) call entry(row, row + 1, -1.0d0 + merge(0.3d0, 0.0d0, sym == 0))
                if (j > 1) call entry(row, row - m, -1.0d0)
                if (j < m) call entry(row, row + m, -1.0d0)
                if (k > 1) call entry(row, row - m * m, -1.0d0)
                if (k < m) call entry(row, row + m * m, -1.0d0)
            end do
        end do
    end do
    allocate (x(n, nrhs), b(n, nrhs))
    do r = 1, nrhs
        do i = 1, n
            x(i, r) = 1.0d0 + mod(i * r, 11) / 11.0d0
        end do
    end do

    id%COMM = MPI_COMM_WORLD
    id%SYM = sym
    id%PAR = 1
    id%JOB = -1
    call DMUMPS(id)
    call check("JOB=-1")
    id%ICNTL(1) = 6
    id%ICNTL(2) = -1
    id%ICNTL(3) = -1
    id%ICNTL(4) = 1
    id%ICNTL(13) = 1
    id%ICNTL(18) = dist
    id%N = n
    do round = 1, 2
        scale = round
        if (dist == 3) then
            ! Entries dealt out round-robin: each rank gives every nranks-th one.
            id%NNZ_loc = count([(mod(l - 1, nranks) == rank, l = 1, nnz)])
            if (round == 1) allocate (id%IRN_loc(id%NNZ_loc), id%JCN_loc(id%NNZ_loc), id%A_loc(id%NNZ_loc))
            id%IRN_loc = pack(irn(1:nnz), [(mod(l - 1, nranks) == rank, l = 1, nnz)])
            id%JCN_loc = pack(jcn(1:nnz), [(mod(l - 1, nranks) == rank, l = 1, nnz)])
            id%A_loc = scale * pack(a(1:nnz), [(mod(l - 1, nranks) == rank, l = 1, nnz)])
        else if (rank == 0) then
            id%NNZ = nnz
            if (round == 1) allocate (id%IRN(nnz), id%JCN(nnz), id%A(nnz))
            id%IRN = irn(1:nnz)
            id%JCN = jcn(1:nnz)
            id%A = scale * a(1:nnz)
        end if
        if (rank == 0) then
            ! b = (scale A) x, with the stored triangle mirrored for the symmetric forms.
            b = 0
            do l = 1, nnz
                b(irn(l), :) = b(irn(l), :) + scale * a(l) * x(jcn(l), :)
                if (sym /= 0 .and. irn(l) /= jcn(l)) b(jcn(l), :) = b(jcn(l), :) + scale * a(l) * x(irn(l), :)
            end do
            if (round == 1) allocate (id%RHS(n * nrhs))
            id%RHS = reshape(b, [n * nrhs])
            id%NRHS = nrhs
            id%LRHS = n
        end if
        if (round == 1) then
            id%JOB = 6
            call DMUMPS(id)
            call check("JOB=6 (analysis, factorization, solve)")
        else
            id%JOB = 2
            call DMUMPS(id)
            call check("JOB=2 (factorization of 2A on the same analysis)")
            id%JOB = 3
            call DMUMPS(id)
            call check("JOB=3 (solve)")
        end if
        if (rank == 0) then
            err = maxval(abs(reshape(id%RHS, [n, nrhs]) - x)) / maxval(abs(x))
            if (.not. (err < 1d-9)) then
                errs = errs + 1
                print '(A, I0, A, ES10.3)', 'round ', round, ': relative error ', err
            end if
        end if
    end do
    id%JOB = -2
    call DMUMPS(id)
    call check("JOB=-2")
    if (rank == 0) then
        if (errs == 0) then
            print '(A)', ' No Errors'
        else
            print '(A, I0, A)', ' Found ', errs, ' errors'
        end if
    end if
    call MPI_Finalize(ierr)
contains
    subroutine entry(i, j, v)
        integer, intent(in) :: i, j
        double precision, intent(in) :: v
        if (sym /= 0 .and. j > i) return ! one triangle for the symmetric forms
        nnz = nnz + 1
        irn(nnz) = i
        jcn(nnz) = j
        a(nnz) = v
    end subroutine entry

    subroutine check(what)
        character(len=*), intent(in) :: what
        if (id%INFOG(1) < 0) then
            if (rank == 0) print '(3A, I0, A, I0)', 'MUMPS ', what, ': INFOG(1) = ', id%INFOG(1), &
                ', INFOG(2) = ', id%INFOG(2)
            call MPI_Abort(MPI_COMM_WORLD, 2, ierr)
        end if
    end subroutine check
end program laplace

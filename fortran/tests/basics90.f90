! `use mpi`: explicit interfaces with choice buffers of any type and rank, MPI_BOTTOM and
! MPI_IN_PLACE, LOGICAL arguments, strings, statuses as INTEGER arrays, cartesian topology.
! Prints " No Errors" when every check holds.
program basics90
    use mpi
    implicit none
    integer :: rank, nranks, errs, ierr, cart, dims(1), coords(1), left, right, n
    integer :: status(MPI_STATUS_SIZE), ivec(3)
    real(kind=8) :: dsum(2)
    logical :: periods(1), flag
    character(len=MPI_MAX_PROCESSOR_NAME) :: host
    character(len=MPI_MAX_INFO_VAL) :: value
    integer :: info

    errs = 0
    call MPI_Init(ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)

    ! scalars and arrays of several types through one interface
    dsum = [1.5d0, real(rank, 8)]
    call MPI_Allreduce(MPI_IN_PLACE, dsum, 2, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    if (dsum(1) /= 1.5d0 * nranks .or. dsum(2) /= nranks * (nranks - 1) / 2) errs = errs + 1
    n = rank
    call MPI_Bcast(n, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
    if (n /= 0) errs = errs + 1

    ! a ring on a periodic cartesian communicator
    dims = 0
    call MPI_Dims_create(nranks, 1, dims, ierr)
    periods = .true.
    call MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, .false., cart, ierr)
    call MPI_Cart_shift(cart, 0, 1, left, right, ierr)
    call MPI_Cart_get(cart, 1, dims, periods, coords, ierr)
    if (.not. periods(1) .or. coords(1) /= rank) errs = errs + 1
    ivec = [rank, -1, -1]
    call MPI_Sendrecv(ivec(1), 1, MPI_INTEGER, right, 1, ivec(2), 1, MPI_INTEGER, left, 1, cart, status, ierr)
    if (ivec(2) /= left .or. status(MPI_SOURCE) /= left .or. status(MPI_TAG) /= 1) errs = errs + 1
    call MPI_Comm_free(cart, ierr)

    ! info strings: keys and values with trailing blanks, a missing key
    call MPI_Info_create(info, ierr)
    call MPI_Info_set(info, 'ferry_key  ', 'a value  ', ierr)
    call MPI_Info_get(info, 'ferry_key', MPI_MAX_INFO_VAL, value, flag, ierr)
    if (.not. flag .or. value /= 'a value') errs = errs + 1
    call MPI_Info_get(info, 'missing', MPI_MAX_INFO_VAL, value, flag, ierr)
    if (flag) errs = errs + 1
    call MPI_Info_free(info, ierr)
    if (info /= MPI_INFO_NULL) errs = errs + 1

    call MPI_Get_processor_name(host, n, ierr)
    if (n <= 0 .or. len_trim(host) /= n) errs = errs + 1
    call MPI_Initialized(flag, ierr)
    if (.not. flag) errs = errs + 1
    if (MPI_Wtime() <= 0 .or. MPI_Wtick() <= 0) errs = errs + 1

    call MPI_Allreduce(MPI_IN_PLACE, errs, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
    if (rank == 0) then
        if (errs == 0) then
            print *, 'No Errors'
        else
            print *, 'Found', errs
        end if
    end if
    call MPI_Finalize(ierr)
end program basics90

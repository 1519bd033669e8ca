! mpi_f08: handle types and their comparisons, TYPE(MPI_Status), optional ierror, sentinels,
! attributes copied by a Fortran copy function, Waitsome indices from 1, MPI_BOTTOM with
! absolute addresses. Prints " No Errors" when every check holds.
module basics08_callbacks
    use mpi_f08
    implicit none
    integer :: copies = 0
contains
    subroutine copy_attr(oldcomm, keyval, extra_state, val_in, val_out, flag, ierror)
        type(MPI_Comm) :: oldcomm
        integer :: keyval, ierror
        integer(kind=MPI_ADDRESS_KIND) :: extra_state, val_in, val_out
        logical :: flag
        copies = copies + 1
        val_out = val_in + extra_state
        flag = .true.
        ierror = MPI_SUCCESS
    end subroutine copy_attr
end module basics08_callbacks

program basics08
    use mpi_f08
    use basics08_callbacks
    implicit none
    integer :: rank, nranks, errs, ierr, key, outcount, indices(2), value(2)
    integer :: x(3)
    integer(kind=MPI_ADDRESS_KIND) :: val, addr
    logical :: flag
    type(MPI_Comm) :: dup, dup2
    type(MPI_Request) :: reqs(2)
    type(MPI_Status) :: status, statuses(2)
    type(MPI_Datatype) :: abs_type

    errs = 0
    call MPI_Init(ierr)
    if (ierr /= MPI_SUCCESS) errs = errs + 1
    call MPI_Comm_rank(MPI_COMM_WORLD, rank)
    call MPI_Comm_size(MPI_COMM_WORLD, nranks)
    if (MPI_COMM_WORLD == MPI_COMM_NULL .or. .not. (MPI_COMM_WORLD /= MPI_COMM_NULL)) errs = errs + 1

    ! a Fortran copy function, run when the communicator is duplicated
    call MPI_Comm_dup(MPI_COMM_WORLD, dup)
    call MPI_Comm_create_keyval(copy_attr, MPI_COMM_NULL_DELETE_FN, key, 100_MPI_ADDRESS_KIND)
    call MPI_Comm_set_attr(dup, key, 23_MPI_ADDRESS_KIND)
    call MPI_Comm_dup(dup, dup2)
    call MPI_Comm_get_attr(dup2, key, val, flag)
    if (.not. flag .or. val /= 123 .or. copies /= 1) errs = errs + 1
    call MPI_Comm_free(dup2)
    if (dup2 /= MPI_COMM_NULL) errs = errs + 1
    call MPI_Comm_free_keyval(key)

    ! Waitsome gives indices from 1; a status reads as TYPE(MPI_Status)
    call MPI_Irecv(value(1), 1, MPI_INTEGER, rank, 7, dup, reqs(1))
    call MPI_Isend(rank + 40, 1, MPI_INTEGER, rank, 7, dup, reqs(2))
    outcount = 0
    indices = 0
    do while (outcount < 2)
        call MPI_Waitsome(2, reqs, outcount, indices, statuses)
        if (outcount == MPI_UNDEFINED) exit
        if (any(indices(1:outcount) < 1) .or. any(indices(1:outcount) > 2)) errs = errs + 1
        if (outcount == 2) exit
    end do
    call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE)
    if (value(1) /= rank + 40) errs = errs + 1

    call MPI_Sendrecv(rank, 1, MPI_INTEGER, rank, 8, value(2), 1, MPI_INTEGER, rank, 8, dup, status)
    if (status%MPI_SOURCE /= rank .or. status%MPI_TAG /= 8 .or. value(2) /= rank) errs = errs + 1

    ! MPI_BOTTOM with a type of absolute addresses
    x = [rank, rank + 1, rank + 2]
    call MPI_Get_address(x(2), addr)
    call MPI_Type_create_hindexed(1, [2], [addr], MPI_INTEGER, abs_type)
    call MPI_Type_commit(abs_type)
    value = -1
    call MPI_Sendrecv(MPI_BOTTOM, 1, abs_type, rank, 9, value, 2, MPI_INTEGER, rank, 9, dup, &
        MPI_STATUS_IGNORE)
    if (value(1) /= rank + 1 .or. value(2) /= rank + 2) errs = errs + 1
    call MPI_Type_free(abs_type)
    if (abs_type /= MPI_DATATYPE_NULL) errs = errs + 1
    call MPI_Comm_free(dup)

    call MPI_Allreduce(MPI_IN_PLACE, errs, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
    if (rank == 0) then
        if (errs == 0) then
            print *, 'No Errors'
        else
            print *, 'Found', errs
        end if
    end if
    call MPI_Finalize()
end program basics08

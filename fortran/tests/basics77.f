C     mpif.h: sentinels, strings, request indices, a user operation and
C     attributes. Prints " No Errors" when every check holds.
      subroutine addints(invec, inoutvec, n, datatype)
      integer n, datatype, i
      integer invec(n), inoutvec(n)
      do i = 1, n
         inoutvec(i) = inoutvec(i) + 2 * invec(i)
      end do
      end

      program basics77
      implicit none
      include 'mpif.h'
      integer ierr, rank, nranks, errs, i, idx, op, key, dup
      integer buf(4), reqs(2), status(MPI_STATUS_SIZE), resultlen
      integer(kind=MPI_ADDRESS_KIND) val, extra
      logical flag
      character*(MPI_MAX_OBJECT_NAME) name
      character*(MPI_MAX_ERROR_STRING) msg
      external addints
      errs = 0
      call MPI_INIT(ierr)
      call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
      call MPI_COMM_SIZE(MPI_COMM_WORLD, nranks, ierr)

C     MPI_IN_PLACE and a sum
      buf(1) = rank
      call MPI_ALLREDUCE(MPI_IN_PLACE, buf(1), 1, MPI_INTEGER, MPI_SUM,
     &     MPI_COMM_WORLD, ierr)
      if (buf(1) .ne. nranks * (nranks - 1) / 2) errs = errs + 1

C     a user operation: inout + 2 * in, from every rank's 1
      buf(1) = 1
      call MPI_OP_CREATE(addints, .true., op, ierr)
      call MPI_ALLREDUCE(MPI_IN_PLACE, buf(1), 1, MPI_INTEGER, op,
     &     MPI_COMM_WORLD, ierr)
      if (nranks .eq. 1 .and. buf(1) .ne. 1) errs = errs + 1
      if (nranks .eq. 2 .and. buf(1) .ne. 3) errs = errs + 1
      call MPI_OP_FREE(op, ierr)

C     Waitany counts from 1; MPI_STATUS_IGNORE is accepted
      call MPI_IRECV(buf(1), 1, MPI_INTEGER, rank, 5, MPI_COMM_WORLD,
     &     reqs(1), ierr)
      call MPI_ISEND(rank, 1, MPI_INTEGER, rank, 5, MPI_COMM_WORLD,
     &     reqs(2), ierr)
      call MPI_WAIT(reqs(2), MPI_STATUS_IGNORE, ierr)
      reqs(2) = MPI_REQUEST_NULL
      call MPI_WAITANY(2, reqs, idx, status, ierr)
      if (idx .ne. 1) errs = errs + 1
      if (reqs(1) .ne. MPI_REQUEST_NULL) errs = errs + 1
      if (status(MPI_SOURCE) .ne. rank .or. status(MPI_TAG) .ne. 5)
     &     errs = errs + 1

C     names in and out, blank padded
      call MPI_COMM_DUP(MPI_COMM_WORLD, dup, ierr)
      call MPI_COMM_SET_NAME(dup, 'ferry dup   ', ierr)
      call MPI_COMM_GET_NAME(dup, name, resultlen, ierr)
      if (name .ne. 'ferry dup' .or. resultlen .ne. 9) errs = errs + 1

C     an attribute that the duplicate copies (MPI_COMM_DUP_FN)
      extra = 0
      call MPI_COMM_CREATE_KEYVAL(MPI_COMM_DUP_FN,
     &     MPI_COMM_NULL_DELETE_FN, key, extra, ierr)
      val = 12345
      call MPI_COMM_SET_ATTR(dup, key, val, ierr)
C     errors come back in ierror under MPI_ERRORS_RETURN
      call MPI_COMM_SET_ERRHANDLER(dup, MPI_ERRORS_RETURN, ierr)
      call MPI_SEND(buf, 1, MPI_INTEGER, nranks, 0, dup, ierr)
      if (ierr .eq. MPI_SUCCESS) errs = errs + 1
      call MPI_COMM_GET_ATTR(MPI_COMM_WORLD, MPI_TAG_UB, val, flag,
     &     ierr)
      if (.not. flag .or. val .lt. 32767) errs = errs + 1
      call MPI_COMM_FREE(dup, ierr)
      if (dup .ne. MPI_COMM_NULL) errs = errs + 1
      call MPI_COMM_FREE_KEYVAL(key, ierr)

      call MPI_ERROR_STRING(MPI_ERR_COMM, msg, resultlen, ierr)
      if (resultlen .le. 0 .or. resultlen .gt. len(msg)) errs = errs + 1

      call MPI_ALLREDUCE(MPI_IN_PLACE, errs, 1, MPI_INTEGER, MPI_SUM,
     &     MPI_COMM_WORLD, ierr)
      if (rank .eq. 0 .and. errs .eq. 0) print *, 'No Errors'
      if (rank .eq. 0 .and. errs .ne. 0) print *, 'Found', errs
      call MPI_FINALIZE(ierr)
      end
